"""Start a submission's process under the grader's limits, as the sandbox's own user (lesson: Instructor guide).

    python -m hvdcourse.course.grading.confine --mem-mb M --nproc N --cpu S [--uid U] [--give FILE] -- CMD ...

Sets the limits every process of a notebook gets (address space, processes and threads of its user,
CPU seconds; no core files), then, when the grader runs as root, drops to user ``U`` (no other
groups, no way back through setuid programs) and replaces itself with ``CMD``. ``--give`` hands a file
to that user first (the kernel's connection file). Running as another user is what keeps the
submission's code away from the grader: it cannot write the course's files or the virtual
environment, read the grader's environment in /proc, or signal the grader's processes.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import sys

PR_SET_NO_NEW_PRIVS = 38


def limits_args(limits: dict, uid: int | None) -> list:
    """The options of this module for ``limits`` ({'mem_mb', 'nproc', 'cpu'}) and an optional user."""
    args = [
        "--mem-mb",
        str(int(limits["mem_mb"])),
        "--nproc",
        str(int(limits["nproc"])),
        "--cpu",
        str(int(limits["cpu"])),
    ]
    return args + (["--uid", str(uid)] if uid is not None else [])


def command(limits: dict, uid: int | None, cmd: list, give: str | None = None) -> list:
    """``cmd`` wrapped by this module."""
    from hvdcourse.runtime.paths import ROOT

    boot = f"import sys; sys.path.insert(0, {ROOT!r}); from hvdcourse.course.grading.confine import main; main()"
    # -I: the wrapper itself ignores the sandbox's PYTHONPATH (its audit hook would refuse the chown)
    return (
        [sys.executable, "-I", "-c", boot, *limits_args(limits, uid)]
        + (["--give", give] if give else [])
        + ["--", *cmd]
    )


def apply(mem_mb: int, nproc: int, cpu: int, uid: int | None = None, give: tuple = ()) -> None:
    """Limit this process (and what it starts), then become ``uid`` if given."""
    if mem_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb * 2**20, mem_mb * 2**20))
    if cpu > 0:
        # SIGXCPU at cpu s, SIGKILL 5 s later
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if uid is not None:
        for path in give:
            os.chown(path, uid, uid)
        os.setgroups([])
        os.setgid(uid)
        if nproc > 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        os.setuid(uid)
    elif nproc > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mem-mb", type=int, required=True)
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("--cpu", type=int, required=True)
    parser.add_argument("--uid", type=int, default=None)
    parser.add_argument("--give", action="append", default=[])
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command to run after --")
    apply(args.mem_mb, args.nproc, args.cpu, args.uid, tuple(args.give))
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    sys.exit(main())
