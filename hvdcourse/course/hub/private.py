"""The answer keys, closed to learners' accounts when the class hub starts (lesson: Instructor guide).

What counts as an answer key, and where it lives:

- ``solutions/``: the solution notebooks of the 15 exercises;
- ``exercises/source/``: the exercise sources, whose ``### BEGIN/END SOLUTION`` regions are the
  solutions;
- ``tests/``: the grader's sample submissions (``tests/grading/submissions/alice`` is the solutions),
  and tests that spell out right answers;
- ``.git/``: the history holds all of the above, and the older package that still printed the keys;
- ``hvdcourse/course/grading/keys/`` (:mod:`hvdcourse.course.grading.keys`): the grader's hidden inputs
  (they were ``grading/hidden.py``'s ``INPUTS``) and exercise 11's answer (which lines of the buggy
  script show each mistake: they were the regexes of ``checks.BUG_KINDS``, which a learner could
  print). The judge and the runner read them there; the learner-facing package never imports them:
  exercise 11's self-check holds salted digests of the right (kind, line) pairs instead (see the
  comment at ``checks_tools.BUG_DIGESTS`` for why a small answer space is acceptable there).

Not keys, and left readable: the exercises' visible inputs and what the self-checks say about them
(a self-check tells a learner the expected value of a visible case when they get it wrong: that is
its feedback; the grader's defence against answers written for those cases is its hidden inputs), the
lesson pages' own worked solutions (they are published in the book), and the learner notebooks.

How learners are kept out: the learners' kernel runs the course's package from the clone (an
editable install), so the clone stays readable, but :func:`close` takes every permission of group
and others off each place above (``chmod go-rwx``; the owner, root or the instructor who owns the
clone, keeps them), in the clone and in the kernel's own copy of the package if it has one. A folder
that others cannot enter hides everything under it, whatever the files' own modes. Stale bytecode
is refreshed first (``compileall`` with the kernel's interpreter) and bytecode of deleted modules
removed, so that no ``__pycache__`` left readable holds an older module that carried a key.
``hub start`` calls it every time, so a folder made anew (``make exercises``, a ``git pull``) is
closed again at the next start.
"""

from __future__ import annotations

import os
import stat
import subprocess

from hvdcourse.runtime.paths import ROOT

# relative to the clone
PLACES = ("solutions", os.path.join("exercises", "source"), "tests", ".git")
KEYS = os.path.join("course", "grading", "keys")  # relative to the hvdcourse package


def places(root: str = ROOT, packages: tuple = ()) -> list:
    """The instructor-only folders that exist: :data:`PLACES` in ``root``, the keys of the package
    in ``root`` and in each folder of ``packages`` (other copies of ``hvdcourse``)."""
    found = [os.path.join(root, p) for p in PLACES]
    for package in (os.path.join(root, "hvdcourse"), *packages):
        found.append(os.path.join(package, KEYS))
    seen, out = set(), []
    for path in found:
        real = os.path.realpath(path)
        if real not in seen and os.path.isdir(real):
            seen.add(real)
            out.append(real)
    return out


def kernel_package(python: str) -> str:
    """The folder of the ``hvdcourse`` package that ``python`` imports ('' if it imports none)."""
    proc = subprocess.run(
        [python, "-I", "-c", "import os, hvdcourse; print(os.path.dirname(hvdcourse.__file__))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def refresh_bytecode(package: str, python: str) -> None:
    """Recompile ``package``'s stale bytecode with ``python`` and remove bytecode whose module is
    gone, so that no readable ``.pyc`` holds an older version of a module."""
    subprocess.run(
        [python, "-I", "-m", "compileall", "-q", package], capture_output=True, timeout=600
    )
    for folder, dirs, files in os.walk(package):
        if os.path.basename(folder) != "__pycache__":
            continue
        source_dir = os.path.dirname(folder)
        for name in files:
            module = name.split(".", 1)[0]
            if name.endswith(".pyc") and not os.path.exists(
                os.path.join(source_dir, module + ".py")
            ):
                os.remove(os.path.join(folder, name))


def modes(paths: list) -> dict:
    """``{path: permission bits}`` now (to restore them, e.g. after a test)."""
    return {p: stat.S_IMODE(os.stat(p).st_mode) for p in paths if os.path.exists(p)}


def restore(saved: dict) -> None:
    for path, mode in saved.items():
        if os.path.exists(path):
            os.chmod(path, mode)


def close(root: str = ROOT, python: str | None = None) -> list:
    """Close the answer keys to every account but the owner's; returns the folders closed.
    ``python``: the learners' kernel interpreter (its package's bytecode is refreshed, and its keys
    closed too when it has a copy of its own)."""
    packages = []
    if python:
        package = kernel_package(python)
        if package:
            packages.append(package)
            refresh_bytecode(package, python)
    closed = places(root, tuple(packages))
    for path in closed:
        os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) & ~0o077)
    return closed
