"""The grader's sandbox inside every Python process of a submission (lesson: Instructor guide).

The grader starts the student's kernel with ``PYTHONPATH`` pointing at a folder whose
``sitecustomize.py`` calls :func:`install`; the MPI ranks a check starts inherit the environment, so
they are covered too. :func:`install` adds an audit hook (PEP 578) that

* denies opening, listing or copying anything under the denied folders (the solutions, the exercise
  sources, the tests, the other submissions, the results) and records the attempt;
* denies writing, deleting or renaming anything outside the submission's folder (and ``/dev``);
* denies starting a program whose arguments name a denied folder.

Each violation is appended as one JSON line to a log the grader opened for it, and the call fails
with ``PermissionError``. The policy comes from the ``HVDCOURSE_SANDBOX`` variable (JSON with
``workdir``, ``deny``, ``log``). Audit hooks stop Python code, not a determined attacker with
ctypes; the grader also hides the denied folders with a private mount namespace where it can.
"""

from __future__ import annotations

import json
import os
import sys

ENV = "HVDCOURSE_SANDBOX"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PATH_WRITE_EVENTS = {  # event -> indexes of the path arguments that get written
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.replace": (0, 1),
    "os.symlink": (1,),
    "os.link": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "shutil.rmtree": (0,),
    "shutil.copyfile": (1,),
    "shutil.copytree": (1,),
    "shutil.move": (0, 1),
    "shutil.copymode": (1,),
    "shutil.copystat": (1,),
}
PATH_READ_EVENTS = {
    "os.listdir": (0,),
    "os.scandir": (0,),
    "shutil.copyfile": (0,),
    "shutil.copytree": (0,),
    "shutil.move": (0,),
    "glob.glob": (0,),
}
EXEC_EVENTS = {
    "subprocess.Popen": 1,
    "os.exec": 1,
    "os.posix_spawn": 1,
    "os.system": 0,
    "os.spawn": 2,
}


class Policy:
    """Where a submission may read and write."""

    def __init__(
        self, workdir: str, deny: list, log_fd: int | None = None, extra_write: tuple = ("/dev",)
    ):
        self.workdir = os.path.realpath(workdir)
        self.deny = [os.path.realpath(d) for d in deny if d]
        self.write_ok = [self.workdir, *(os.path.realpath(p) for p in extra_write)]
        self.log_fd = log_fd

    @staticmethod
    def _under(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    def resolve(self, path) -> str | None:
        if isinstance(path, int) or path is None:
            return None
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        elif hasattr(path, "__fspath__"):
            path = os.fspath(path)
        if not isinstance(path, str):
            return None
        return os.path.realpath(path)

    def denied(self, path) -> bool:
        real = self.resolve(path)
        return real is not None and any(self._under(real, d) for d in self.deny)

    def writable(self, path) -> bool:
        real = self.resolve(path)
        return real is None or any(self._under(real, w) for w in self.write_ok)

    def mentions_denied(self, args) -> str | None:
        """The first argument of a command line that names a denied folder (resolved or as text)."""
        if isinstance(args, (str, bytes)):
            args = [args]
        for arg in args or ():
            text = os.fsdecode(arg) if isinstance(arg, bytes) else str(arg)
            for piece in text.replace("=", " ").split():
                if piece.startswith("-"):
                    continue
                if self.denied(piece) or any(d in piece for d in self.deny):
                    return text
        return None

    def check(self, event: str, args: tuple):
        """None if allowed, else (kind, path) of the violation."""
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if self.denied(path):
                return "read-solutions", str(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writing and not self.writable(path):
                return "write-outside", str(path)
            return None
        if event in PATH_READ_EVENTS:
            for i in PATH_READ_EVENTS[event]:
                if i < len(args) and self.denied(args[i]):
                    return "read-solutions", str(args[i])
        if event in PATH_WRITE_EVENTS:
            for i in PATH_WRITE_EVENTS[event]:
                if i < len(args) and not self.writable(args[i]):
                    return "write-outside", str(args[i])
        if event in EXEC_EVENTS:
            index = EXEC_EVENTS[event]
            command = args[index] if index < len(args) else None
            named = self.mentions_denied(command)
            if named:
                return "read-solutions", named
        return None


def _hook_for(policy: Policy):
    import threading

    state = threading.local()

    def hook(event, args):
        if getattr(state, "busy", False) or not (
            event == "open"
            or event in PATH_WRITE_EVENTS
            or event in PATH_READ_EVENTS
            or event in EXEC_EVENTS
        ):
            return
        state.busy = True  # realpath and the log write must not re-enter the hook
        try:
            found = policy.check(event, args)
            if found is None:
                return
            kind, path = found
            if policy.log_fd is not None:
                line = (
                    json.dumps({"kind": kind, "path": path, "event": event, "pid": os.getpid()})
                    + "\n"
                )
                try:
                    os.write(policy.log_fd, line.encode())
                except OSError:
                    pass
        finally:
            state.busy = False
        what = (
            "reading the solutions or other graded material"
            if kind == "read-solutions"
            else "writing outside the submission's folder"
        )
        raise PermissionError(
            f"[grader] {event} {path!r} denied: {what} is not allowed while grading"
        )

    return hook


def install(environ=None) -> bool:
    """Install the hook from ``HVDCOURSE_SANDBOX``; False if the variable is not set."""
    environ = os.environ if environ is None else environ
    spec = environ.get(ENV)
    if not spec:
        return False
    config = json.loads(spec)
    log_fd = None
    if config.get("log"):
        # before the hook
        log_fd = os.open(config["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sys.addaudithook(_hook_for(Policy(config["workdir"], config.get("deny", []), log_fd)))
    return True
