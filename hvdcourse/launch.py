"""Run a command on N ranks with a hard timeout and full clean-up (lesson: Horovod's design).

Every multi-process run of the course (tests, notebooks, checks, grader) goes through
:func:`run_ranks`: it starts the launcher in its own process group, enforces a wall-clock limit and
kills the whole group on timeout or error, so a hanging rank can never hang the caller.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from hvdcourse.mpienv import launch_env, require_mpi

LAUNCHERS = ("gloo", "mpi", "mpirun", "python")


@dataclass
class RankRun:
    """Outcome of :func:`run_ranks`."""

    command: list
    returncode: int
    output: str
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def launcher_command(np: int, launcher: str, program: list) -> list:
    """Build the launch command line for ``np`` ranks of ``program`` (a list of arguments)."""
    if launcher == "python":
        if np != 1:
            raise ValueError("launcher 'python' runs a single process; use gloo, mpi or mpirun for np > 1")
        return list(program)
    if launcher in ("gloo", "mpi"):
        horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
        return [horovodrun, "-np", str(np), "-H", f"localhost:{np}", f"--{launcher}", *program]
    if launcher == "mpirun":
        # --bind-to none: let each rank's threads use any core; map by slot keeps ranks on one host.
        return [require_mpi(), "-np", str(np), "--bind-to", "none", "--map-by", "slot", *program]
    raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")


def kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Terminate the process group of ``proc`` (launcher and all ranks), then kill what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            if sig == signal.SIGTERM:
                # the launcher may exit before its children: sweep the group once more.
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def run_ranks(program: list, np: int = 2, launcher: str = "gloo", timeout: float = 300,
              env: dict | None = None, cwd: str | None = None, max_output: int = 2_000_000,
              echo: bool = False) -> RankRun:
    """Run ``program`` on ``np`` ranks; never longer than ``timeout`` seconds.

    ``program`` is e.g. ``[sys.executable, "-m", "hvdcourse.train_hvd", "--epochs", "1"]``.
    Output (stdout and stderr merged) is kept up to ``max_output`` characters.
    """
    cmd = launcher_command(np, launcher, program)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", env=launch_env(env), cwd=cwd, start_new_session=True)
    chunks, size, timed_out = [], 0, False
    try:
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            if not sel.select(timeout=min(remaining, 1.0)):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            if echo:
                print(line, end="", flush=True)
            if size < max_output:
                chunks.append(line[: max_output - size])
                size += len(chunks[-1])
    finally:
        if timed_out or proc.poll() is None:
            kill_group(proc)
        else:
            kill_group(proc, grace=1.0)  # stragglers of a finished launcher
        proc.stdout.close()
    returncode = proc.wait()
    output = "".join(chunks)
    if timed_out:
        output += f"\n[hvdcourse] TIMEOUT: stopped after {timeout:.0f} s; all ranks were killed.\n"
    return RankRun(cmd, returncode if not timed_out else 124, output, time.monotonic() - start, timed_out)


def main(argv=None) -> int:
    """``python -m hvdcourse.launch -np 2 --launcher mpi --timeout 60 -- python script.py``"""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("-np", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="gloo")
    parser.add_argument("--timeout", type=float, default=600, help="wall-clock limit in seconds")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="command to run on every rank")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("give the program to run after --")
    result = run_ranks(program, args.np, args.launcher, args.timeout, echo=True)
    if result.timed_out:
        print(f"[hvdcourse] run timed out after {args.timeout:.0f} s", file=sys.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
