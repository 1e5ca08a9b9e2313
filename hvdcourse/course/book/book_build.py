"""Build the book (``make book``) or execute single lessons (lesson authors, tests).

``python -m hvdcourse.course.book.book_build``               - execute every lesson and build ``_build/html``
``python -m hvdcourse.course.book.book_build --execute F.md`` - execute one lesson with nbclient, fail on error

The build is strict: ``-W -n --keep-going`` turns a failing cell, a broken reference or any
warning into a failed build (Jupyter Book 1.x otherwise exits 0 on a failed cell).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from hvdcourse.runtime.mpienv import launch_env
from hvdcourse.runtime.errors import RunFailed, RunTimeout, UsageError, run_cli
from hvdcourse.runtime.paths import BOOK_DATA, ROOT

BUILD_TIMEOUT = 1800


def book_env() -> dict:
    """Environment for executing lessons: MPI defaults, quiet TF, a private IPython dir."""
    # TF_CPP_MIN_LOG_LEVEL=3: TensorFlow 2.20 logs "failed call to cuInit" at ERROR level on every machine
    # without an NVIDIA driver; on a page that line is noise (and stderr in a cell fails the strict build).
    env = launch_env({"PYTHONPATH": ROOT, "PYDEVD_DISABLE_FILE_VALIDATION": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
    env.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="hvdcourse-ipython-"))
    return env


def execute_lesson(path: str, timeout: int = 900) -> float:
    """Execute the MyST notebook ``path`` in a fresh kernel; raise on the first failing cell."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    os.environ.update(book_env())
    start = time.monotonic()
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    except CellTimeoutError as err:
        print(err, file=sys.stderr)
        raise RunTimeout(f"{path}: a cell ran longer than {timeout} s (above); raise --timeout or fix the cell") from None
    except CellExecutionError as err:
        print(err, file=sys.stderr)  # the cell and its traceback: what the author needs to fix it
        raise RunFailed(f"{path}: a cell failed (its source and error are above)") from None
    missing = unglued_references(nb)
    if missing:
        raise RunFailed(f"{path}: the prose shows {', '.join(missing)}, which no cell glued: "
                        "glue them (myst_nb.glue) or fix the names")
    return time.monotonic() - start


# {glue}`key`, {glue:text}`key:.1f`, ```{glue:figure} key``` ... (myst-nb's glue roles and directives)
_GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
_GLUE_DIRECTIVE = re.compile(r"^\s*(?:```|:::)\{glue(?::\w+)?\}\s+(\S+)", re.MULTILINE)


def glued_keys(nb) -> list:
    """Names glued by the executed notebook ``nb``'s outputs (``myst_nb.glue`` marks them "scrapbook")."""
    return [output.get("metadata", {})["scrapbook"]["name"]
            for cell in nb.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if "scrapbook" in output.get("metadata", {})]


def unglued_references(nb) -> list:
    """Glue names the markdown refers to that no cell of the executed notebook ``nb`` glued, sorted.

    References to another page's values (``other::key``) are left to the book build to check.
    """
    text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    roles = [content.split(":")[0] for content in _GLUE_ROLE.findall(text) if "::" not in content]
    referenced = set(roles) | {key for key in _GLUE_DIRECTIVE.findall(text) if "::" not in key}
    return sorted(referenced - set(glued_keys(nb)))


def build_book(timeout: int = BUILD_TIMEOUT, record: bool = False) -> int:
    jb = os.path.join(os.path.dirname(sys.executable), "jupyter-book")
    cmd = [jb, "build", ROOT, "--builder", "html", "-W", "-n", "--keep-going"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=book_env(), start_new_session=True, text=True,
                            errors="replace", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []

    def relay():  # show the build as it goes, and keep the lines for the timing report
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        from hvdcourse.runtime.launch import kill_group
        kill_group(proc)
        raise RunTimeout(f"the book build took longer than {timeout} s and was stopped")
    reader.join(timeout=10)
    seconds = time.monotonic() - start
    os.makedirs(os.path.join(ROOT, "_build"), exist_ok=True)
    with open(BUILD_LOG, "w") as fh:
        fh.write("".join(lines))
    index = os.path.join(ROOT, "_build", "html", "index.html")
    if code != 0:
        os.remove(BUILD_LOG)  # a failed build is never "current"
        raise RunFailed(f"jupyter-book failed (exit {code}); the first error above names the cell")
    if not os.path.isfile(index):
        raise RunFailed(f"the book build finished but {index} is missing")
    _report_times(_execution_times("".join(lines)), seconds, record)
    print(f"book: built {index} in {seconds:.0f} s")
    return 0


TIMES_RECORD = os.path.join(BOOK_DATA, "execution_times.json")
BUILD_LOG = os.path.join(ROOT, "_build", "book-build.log")
# What a build depends on: a build newer than all of these is current (see tests/book/conftest.py).
SOURCES = ("_config.yml", "_toc.yml", "requirements.txt", "book", "notebooks", "hvdcourse", "slurm", "tools")


def newest_source_mtime() -> float:
    newest = 0.0
    for name in SOURCES:
        path = os.path.join(ROOT, name)
        for dirpath, dirnames, files in os.walk(path) if os.path.isdir(path) else [(ROOT, [], [name])]:
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in files:
                newest = max(newest, os.path.getmtime(os.path.join(dirpath, f)))
    return newest


def build_is_current() -> bool:
    """True if the last successful build (its log) is newer than every source of the book."""
    index = os.path.join(ROOT, "_build", "html", "index.html")
    if not (os.path.isfile(index) and os.path.isfile(BUILD_LOG)):
        return False
    return min(os.path.getmtime(index), os.path.getmtime(BUILD_LOG)) > newest_source_mtime()


_EXECUTED = re.compile(r"(\S+)\.(?:md|ipynb): Executed notebook in ([\d.]+) seconds")


def _execution_times(log: str) -> dict:
    """{lesson name: seconds} from myst-nb's "Executed notebook in N seconds" lines."""
    return {os.path.basename(name): float(secs) for name, secs in _EXECUTED.findall(log)}


def _report_times(times: dict, total: float, record: bool = False) -> None:
    """Print each page's execution time; keep them in ``_build`` (and, with ``record``, in the book)."""
    from hvdcourse.course.bench.machine import cpu_model, load_average, memory_gib

    for name, runtime in sorted(times.items()):
        print(f"book:   {runtime:7.1f} s  {name}")
    print(f"book: executing lessons took {sum(times.values()):.0f} s of a {total:.0f} s build")
    load = load_average()
    summary = {"machine": f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB "
                          f"(load average {load[1]:.1f} over the last 5 min of the build)",
               "date": time.strftime("%Y-%m-%d"), "build_seconds": round(total),
               "execution_seconds": round(sum(times.values())),
               "lessons": {name: round(runtime, 1) for name, runtime in sorted(times.items())}}
    targets = [os.path.join(ROOT, "_build", "execution_times.json")] + ([TIMES_RECORD] if record else [])
    for target in targets:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as fh:
            json.dump(summary, fh, indent=2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", nargs="+", metavar="LESSON", help="only execute these lessons")
    parser.add_argument("--timeout", type=int, default=BUILD_TIMEOUT)
    parser.add_argument("--record-times", action="store_true",
                        help=f"also write the lessons' execution times to {os.path.relpath(TIMES_RECORD, ROOT)}")
    args = parser.parse_args(argv)
    if args.execute:
        missing = [path for path in args.execute if not os.path.isfile(path)]
        if missing:
            raise UsageError(f"no lesson file {', '.join(missing)}; give paths such as notebooks/05_conversion.md")
        for path in args.execute:
            seconds = execute_lesson(path, timeout=args.timeout)
            print(f"executed {path} in {seconds:.1f} s")
        return 0
    return build_book(args.timeout, args.record_times)


if __name__ == "__main__":
    sys.exit(run_cli(main))
