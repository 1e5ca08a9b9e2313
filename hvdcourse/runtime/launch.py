"""Run a command on N ranks with a hard timeout and full clean-up (lesson: Horovod's design, explored live).

Every multi-process run of the course (tests, notebooks, checks, grader) goes through
:func:`run_ranks`: it starts the launcher in its own process group, enforces a wall-clock limit and
kills the whole group on timeout or error, so a hanging rank can never hang the caller.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from hvdcourse.runtime import results as rank_results
from hvdcourse.runtime.mpienv import launch_env, require_mpi
from hvdcourse.runtime.errors import MissingToolError

LAUNCHERS = ("gloo", "mpi", "mpirun", "python", "elastic", "torchrun")
ELASTIC_TIMEOUT = 60  # seconds horovodrun's elastic driver waits for enough slots before giving up
# horovodrun tags each line with the rank: "[1]<stdout>:" (Gloo) or "[1,0]<stdout>:" (MPI); run_ranks asks
# mpirun for the same tags. Values never travel in the output (the trainers, checkpoints and fault
# probes report them through hvdcourse.runtime.results), but its lines are still read: by people
# (echo, the lessons' excerpts) and by failure_summary, which names the rank that failed first from
# a tagged traceback or a "[hvdcourse] rank N failed" line; the tags are what lets mend_tagged_lines
# keep those lines whole.
_RANK_TAG = re.compile(r"\[\d+(?:,\d+)?\]<std(?:out|err)>:")


def mend_tagged_lines(text: str) -> str:
    """Rejoin rank lines that the launcher split into pieces.

    mpirun tags every piece of output it reads from a rank, not every line: a line that a rank wrote
    in two pieces arrives as ``[1,0]<stdout>:rank=0 ...[1,1]<stdout>:rank=1 ...\n[1,0]<stdout>:\n``.
    Each piece is appended to its rank's pending line; a line is emitted, with its tag once, when its
    newline arrives. Untagged text (the launcher's own messages) is kept in place.
    """
    out, pending, tag, pos = [], {}, None, 0
    for match in list(_RANK_TAG.finditer(text)) + [None]:
        piece = text[pos : match.start() if match else len(text)]
        if tag is None:
            out.append(piece)
        else:
            newline = piece.find("\n")
            if newline < 0:
                pending[tag] = pending.get(tag, "") + piece
            else:
                out.append(tag + pending.pop(tag, "") + piece[: newline + 1])
                out.append(piece[newline + 1 :])  # text after a tagged line is not that rank's
        if match:
            tag, pos = match.group(0), match.end()
    out.extend(f"{tag}{rest}\n" for tag, rest in pending.items())  # lines never ended
    return "".join(out)


@dataclass
class RankRun:
    """Outcome of :func:`run_ranks`."""

    command: list
    returncode: int
    output: str
    seconds: float
    timed_out: bool
    failure: str = ""  # one line naming the rank that failed first, when the output tells
    # what each rank passed to hvdcourse.runtime.results.report, in rank order: a list of records,
    # or None for a rank that reported nothing
    results: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def records(self, kind: str) -> list:
        """Every record whose ``"kind"`` is ``kind``, rank 0's first, each rank's in the order reported."""
        return [
            record
            for records in self.results
            for record in records or []
            if isinstance(record, dict) and record.get("kind") == kind
        ]

    def rank_results(self, rank: int = 0) -> list:
        """The records ``rank`` reported; raises ``RuntimeError`` naming the rank if it reported none."""
        if rank >= len(self.results) or self.results[rank] is None:
            status = "timed out" if self.timed_out else f"exit code {self.returncode}"
            raise RuntimeError(
                f"rank {rank} reported no result ({status}); its output ends:\n"
                + "\n".join(self.output.strip().splitlines()[-15:])
            )
        return self.results[rank]


def launcher_command(
    np: int, launcher: str, program: list, discovery: str | None = None, min_np: int = 1
) -> list:
    """Build the launch command line for ``np`` ranks of ``program`` (a list of arguments).

    ``launcher="elastic"``: Horovod Elastic on this machine (Gloo), between ``min_np`` and ``np``
    workers; ``discovery`` is the host discovery command (default: ``echo localhost:NP``).
    """
    if launcher == "python":
        if np != 1:
            raise ValueError(
                "launcher 'python' runs a single process; use gloo, mpi or mpirun for np > 1"
            )
        return list(program)
    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    if launcher in ("gloo", "mpi"):
        if launcher == "mpi":
            require_mpi()  # horovodrun --mpi runs mpirun: say clearly when there is none
        return [horovodrun, "-np", str(np), "-H", f"localhost:{np}", f"--{launcher}", *program]
    if launcher == "mpirun":
        # --bind-to none: let each rank's threads use any core; map by slot keeps ranks on one host.
        # --tag-output: run_ranks rejoins a rank's line that mpirun forwarded in pieces (a Python with
        # PYTHONUNBUFFERED=1 writes a line and its newline separately), then removes the tags.
        return [
            require_mpi(),
            "-np",
            str(np),
            "--bind-to",
            "none",
            "--map-by",
            "slot",
            "--tag-output",
            *program,
        ]
    if launcher == "elastic":
        # --network-interface lo: without it an elastic job waits for 2 hosts to compare interfaces.
        return [
            horovodrun,
            "-np",
            str(np),
            "--min-np",
            str(min_np),
            "--max-np",
            str(np),
            "--network-interface",
            "lo",
            "--elastic-timeout",
            str(ELASTIC_TIMEOUT),
            "--host-discovery-script",
            discovery or f"echo localhost:{np}",
            *program,
        ]
    if launcher == "torchrun":
        # PyTorch's launcher (DDP): one node, a private rendezvous on a free port; --no-python runs
        # ``program`` as it is (it already names the interpreter)
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        if not os.path.exists(torchrun):
            raise MissingToolError(
                f"no torchrun next to {sys.executable}: PyTorch is not installed in this "
                "environment. Run 'make env' (it installs the course's pinned torch)."
            )
        return [
            torchrun,
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(np),
            "--no-python",
            *program,
        ]
    raise ValueError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")


def _exit_status(code: str) -> str:
    """``exit code 137: killed by SIGKILL`` (a status above 128, or negative, means a signal)."""
    code = int(code)
    if code < 0 or code > 128:  # -9 (Python) or 137 (shell): killed by signal 9
        number = -code if code < 0 else code - 128
        try:
            return f"exit code {code}: killed by {signal.Signals(number).name}"
        except ValueError:
            pass
    return f"exit code {code}"


# How a failed run tells which rank failed first, most reliable first: what the ranks (and
# OpenMPI's signal report) say, then the launchers' own "first process to exit" reports.
_FROM_RANKS = (
    # OpenMPI (mpirun, horovodrun --mpi): a rank killed by a signal
    (
        re.compile(
            r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)(?: \((\w+)\))?"
        ),
        lambda m: (
            f"rank {m[1]} failed first (killed by signal {m[2]}" + (f", {m[3]})" if m[3] else ")")
        ),
    ),
    # the course's scripts (hvdcourse.examples.cli.run_trainer): the rank that raised, not those Horovod stopped
    (
        re.compile(
            r"\[hvdcourse\] rank (\d+) failed: ((?:(?!\[hvdcourse|\[\d+[,\]])[^\n]){0,120})"
        ),
        lambda m: f"rank {m[1]} failed first ({m[2].strip()})",
    ),
    # the course's fault injection (hvdcourse.course.lessons.faults)
    (
        re.compile(r"\[hvdcourse\.faults\] rank (\d+): injecting '(\w+)'"),
        lambda m: f"rank {m[1]} failed first (injected '{m[2]}')",
    ),
    # Horovod's stall check: ranks that never joined a collective
    (
        re.compile(r"Missing ranks:\s*\n(?:\[[\d,]+\]<\w+>:)?\s*(\d+)!?: \["),
        lambda m: f"rank {m[1]} failed first (stalled: it never joined the others' collective)",
    ),
)
_FROM_LAUNCHERS = (
    # OpenMPI: the first rank that exited with a non-zero status
    (
        re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(-?\d+)"),
        lambda m: f"rank {m[1]} failed first ({_exit_status(m[2])})",
    ),
    # horovodrun --gloo: "Process name: 1 / Exit code: 1" (first process to fail)
    (
        re.compile(r"Process name:\s*(\d+)\s*\n\s*Exit code:\s*(-?\d+)"),
        lambda m: f"rank {m[1]} failed first ({_exit_status(m[2])})",
    ),
    # horovodrun elastic: "Process name: localhost[1]" is a host and a slot, not a rank
    (
        re.compile(r"Process name:\s*([\w.\-]+)\[(\d+)\]\s*\n\s*Exit code:\s*(-?\d+)"),
        lambda m: f"the worker in slot {m[2]} of host {m[1]} failed first ({_exit_status(m[3])})",
    ),
    # horovodrun --gloo, while it stops the others: "Process 1 exit with status code 137."
    (
        re.compile(r"Process (\d+) exit with status code (-?\d+)"),
        lambda m: f"rank {m[1]} failed first ({_exit_status(m[2])})",
    ),
    # a Python traceback in output tagged by rank (horovodrun: "[1]<stderr>:", "[1,1]<stderr>:")
    (
        re.compile(r"^\[(?:\d+,)?(\d+)\]<stderr>:Traceback", re.M),
        lambda m: f"rank {m[1]} failed first (Python exception)",
    ),
)
# A course script that stopped on bad input prints one "hvdcourse: error: ..." line (no rank failed: all
# stop; hvdcourse.runtime.errors.run_cli).
_REPORTED_ERROR = re.compile(
    r"^(?:\[[\d,]+\]<stderr>:)?(?:hvdcourse: )?(error: [^\n]{1,300})", re.M
)


def failure_summary(output: str) -> str:
    """``rank N failed first (how)`` from a failed run's output, or ``""`` if the output does not say.

    A run that stopped on an error it reported itself (bad input) is summed up by that error.
    """
    for pattern, summary in _FROM_RANKS:
        match = pattern.search(output)
        if match:
            return summary(match)
    reported = _REPORTED_ERROR.search(output)
    if reported:  # a clean error says more than a launcher's exit code
        return f"stopped on a reported {reported[1]}"
    for pattern, summary in _FROM_LAUNCHERS:
        match = pattern.search(output)
        if match:
            return summary(match)
    return ""


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


def run_ranks(
    program: list,
    np: int = 2,
    launcher: str = "gloo",
    timeout: float = 300,
    env: dict | None = None,
    cwd: str | None = None,
    max_output: int = 2_000_000,
    echo: bool = False,
    on_line=None,
    discovery: str | None = None,
    min_np: int = 1,
) -> RankRun:
    """Run ``program`` on ``np`` ranks; never longer than ``timeout`` seconds.

    ``program`` is e.g. ``[sys.executable, "-m", "hvdcourse.examples.train_hvd", "--epochs", "1"]``.
    Output (stdout and stderr merged) is kept up to ``max_output`` characters. ``on_line(line)``
    is called for each line as it arrives (e.g. to change the hosts of an elastic run).
    A failed run ends its output with one ``[hvdcourse] FAILED`` line naming the rank that failed
    first, when the launcher's output tells (also in ``RankRun.failure``).
    What the ranks pass to :func:`hvdcourse.runtime.results.report` comes back in ``RankRun.results``
    (their folder, named in the ranks' ``$HVDCOURSE_RESULTS_DIR``, is removed after the run).
    """
    cmd = launcher_command(np, launcher, program, discovery=discovery, min_np=min_np)
    folder = rank_results.new_folder()
    try:
        run = _run(
            cmd,
            launcher,
            timeout,
            {**(env or {}), rank_results.VARIABLE: folder},
            cwd,
            max_output,
            echo,
            on_line,
        )
        run.results = rank_results.collect(folder, np)
    finally:
        rank_results.remove_folder(folder)
    return run


def _run(
    cmd: list, launcher: str, timeout: float, env: dict, cwd, max_output: int, echo: bool, on_line
) -> RankRun:
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=launch_env(env),
        cwd=cwd,
        start_new_session=True,
    )
    chunks, size, timed_out = [], 0, False

    def take(line: str) -> None:
        nonlocal size
        if echo:
            print(_RANK_TAG.sub("", line) if launcher == "mpirun" else line, end="", flush=True)
        if on_line is not None:
            on_line(line)
        if size < max_output:
            chunks.append(line[: max_output - size])
            size += len(chunks[-1])

    try:
        import codecs
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        # os.read, not readline: a buffered readline can hold a second line that already arrived
        # until more output comes, and select() does not see what the buffer holds
        decoder, pending = codecs.getincrementaldecoder("utf-8")(errors="replace"), ""
        while True:
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                timed_out = True
                break
            if not sel.select(timeout=min(remaining, 1.0)):
                if proc.poll() is not None:
                    break
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            text = pending + decoder.decode(data, final=not data)
            carry = "\r" if data and text.endswith("\r") else ""  # may be half of a \r\n
            # universal newlines, as a text pipe reads them (a progress bar's \r ends a line)
            text = text[: len(text) - len(carry)].replace("\r\n", "\n").replace("\r", "\n")
            *lines, pending = text.split("\n")
            pending += carry
            for line in lines:
                take(line + "\n")
            if not data:
                break
        if pending:  # a last line without its newline
            take(pending)
    finally:
        if timed_out or proc.poll() is None:
            kill_group(proc)
        else:
            kill_group(proc, grace=1.0)  # stragglers of a finished launcher
        proc.stdout.close()
    returncode = proc.wait()
    output = mend_tagged_lines("".join(chunks))
    seconds = time.monotonic() - start
    failure = (
        failure_summary(output)
        if returncode != 0 and not timed_out and launcher != "python"
        else ""
    )
    if launcher == "mpirun":
        output = _RANK_TAG.sub("", output)  # the tags were only asked for to rejoin lines
    if timed_out:
        output += f"\n[hvdcourse] TIMEOUT: stopped after {timeout:.0f} s; all ranks were killed.\n"
    elif returncode != 0 and launcher != "python":
        output += (
            f"\n[hvdcourse] FAILED after {seconds:.1f} s (exit {returncode}): "
            f"{failure or 'the output does not say which rank failed first'}.\n"
        )
        if echo:
            print(output[output.rindex("[hvdcourse] FAILED") :], end="", flush=True)
    return RankRun(cmd, returncode if not timed_out else 124, output, seconds, timed_out, failure)


def main(argv=None) -> int:
    """``python -m hvdcourse.runtime.launch -np 2 --launcher mpi --timeout 60 -- python script.py``"""
    from hvdcourse.runtime.errors import RunTimeout, UsageError

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("-np", type=int, default=2, help="number of ranks (default 2)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="gloo")
    parser.add_argument("--timeout", type=float, default=600, help="wall-clock limit in seconds")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="command to run on every rank")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("give the program to run after --")
    try:
        result = run_ranks(program, args.np, args.launcher, args.timeout, echo=True)
    except ValueError as err:  # a wrong launcher/np combination (no MPI: MissingToolError, exit 2)
        raise UsageError(str(err)) from None
    if result.timed_out:
        raise RunTimeout(
            f"the run timed out after {args.timeout:.0f} s and all ranks were killed; "
            "raise --timeout or make the run shorter"
        )
    return result.returncode


if __name__ == "__main__":
    from hvdcourse.runtime.errors import run_cli

    sys.exit(run_cli(main, stop_on_sigterm=True))
