"""The sandbox of a submission's processes when the grader is not root: bubblewrap (lesson: Instructor guide).

On a cluster the instructor is not root, so the grader cannot give each notebook a Unix user of its
own nor make a mount namespace with ``unshare``. There it starts the kernel and the answer run under
``bwrap`` (Debian's ``bubblewrap``, which makes its namespaces as a normal user through user
namespaces). Inside, a submission sees:

- the system and the course's files read-only (``/`` bound read-only);
- no home folders (``/home``, ``/root`` and the grader's own ``$HOME`` are empty and read-only, as
  is ``/run``), except, read-only, what the grading needs: the course's package and the virtual
  environment with its interpreter;
- a private, empty ``/tmp``, ``/var/tmp`` and ``/dev`` (with its own ``/dev/shm``), thrown away after;
- the denied folders (solutions, exercise sources, tests, .git, submissions, results, ``--deny``)
  and the grader's answer keys (:data:`KEYS`) covered by empty read-only folders that nobody may open;
- its own folder, the only one it may write (and the violation log of the audit hook);
- no network: a network namespace of its own with only the loopback, which the 2-rank checks use
  (Open MPI and Gloo between two ranks of the same sandbox); the kernel talks to the runner through
  Unix sockets in its folder (Jupyter's ``ipc`` transport) instead of TCP;
- its own process tree (PID namespace: no other process can be seen or signalled), its own System V
  IPC and host name, no new user namespaces (``--disable-userns``), no capabilities, no setuid, and
  it dies with the runner.

Processes still run as the grader's user: the limits of :mod:`hvdcourse.course.grading.confine` apply,
and what the user may read outside the home folders and the denied ones stays readable.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

# what every sandbox has: the system read-only, fresh /dev and /proc, every namespace of its own
BASE = (
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--die-with-parent",
    "--new-session",
)
# the grader's answer keys (hvdcourse/course/grading/hidden.py), relative to the course: as root the
# notebook's own user cannot read them; here the sandbox runs as the grader's user, so they are covered
KEYS = os.path.join("hvdcourse", "course", "grading", "keys")
# emptied in every sandbox, and left writable (by the sandbox alone): the shared scratch places
PRIVATE = ("/tmp", "/var/tmp")

_FOUND = None


def available() -> str:
    """The path of a ``bwrap`` that can make its sandbox here (user namespaces allowed), else ''."""
    global _FOUND
    if _FOUND is None:
        exe = shutil.which("bwrap") or ""
        ok = False
        if exe:
            try:
                run = subprocess.run([exe, *BASE, "true"], capture_output=True, timeout=20)
                ok = run.returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _FOUND = exe if ok else ""
    return _FOUND


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def homes() -> list:
    """The home folders hidden in the sandbox: /home, /root and the grader's own."""
    found = ["/home", "/root", os.environ.get("HOME", "")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    real = {os.path.realpath(h) for h in found if h and os.path.isdir(h)}
    return sorted(h for h in real if h != "/")


def needed(root: str) -> list:
    """What the submission's processes need to read: the course's package, the venv, the interpreter."""
    exe = os.path.dirname(os.path.realpath(sys.executable))
    return sorted({os.path.realpath(p) for p in (root, sys.prefix, sys.base_prefix, exe)})


def command(job: dict, workdir: str, cmd: list, exe: str | None = None, hide: bool = True) -> list:
    """``cmd`` in a sandbox whose only writable folder is ``workdir`` (see the module's docstring).

    ``job`` is the runner's job: its ``root`` (the course), ``site`` (read-only: the audit hook, the
    kernel's spec and connection file, MNIST) and ``deny`` (hidden unless ``hide`` is False)."""
    exe = exe or available()
    if not exe:
        raise RuntimeError("bubblewrap (bwrap) cannot make a sandbox here")
    hidden = [*homes(), "/run", *PRIVATE]
    args, closed = [exe, *BASE], [h for h in hidden if h not in PRIVATE]
    for folder in hidden:
        args += ["--tmpfs", folder]
    back = [p for p in needed(job["root"]) if any(_under(p, h) for h in hidden)]
    for path in back:
        args += ["--ro-bind", path, path]
    keys = os.path.realpath(os.path.join(job["root"], KEYS))
    for folder in [*(job["deny"] if hide else ()), keys]:
        # already out of sight unless it lies in a folder bound back
        visible = not any(_under(folder, h) for h in hidden) or any(_under(folder, p) for p in back)
        if visible and os.path.isdir(folder):
            args += ["--perms", "0000", "--tmpfs", folder]
            closed.append(folder)
    site = os.path.realpath(job["site"])
    log = os.path.join(site, "violations.jsonl")
    work = os.path.realpath(workdir)
    args += ["--ro-bind", site, site, "--bind", log, log, "--bind", work, work, "--chdir", work]
    for folder in closed:  # read-only once everything is mounted in them
        args += ["--remount-ro", folder]
    return args + ["--", *cmd]


def sandboxed(pid: int) -> int:
    """The process that bubblewrap ``pid`` runs (below its own one or two), else ``pid``: a signal
    meant for it must go there, since bubblewrap passes none on (it dies and takes the sandbox along)."""
    found = pid
    for _ in range(3):
        try:
            with open(f"/proc/{found}/task/{found}/children") as fh:
                children = fh.read().split()
            with open(f"/proc/{found}/cmdline", "rb") as fh:
                program = os.path.basename(fh.read().split(b"\0")[0])
        except OSError:
            break
        if program != b"bwrap" or not children:
            return found
        found = int(children[0])
    return found if found != pid else pid


def exit_signal(returncode) -> int | None:
    """The signal that ended a sandboxed process, from bwrap's exit code (128 + the signal)."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    return returncode - 128 if 128 < returncode < 160 else None
