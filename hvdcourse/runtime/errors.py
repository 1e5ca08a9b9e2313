"""The course's typed errors and the one place that turns them into a message and an exit code.

Library functions raise a :class:`CourseError` (never ``sys.exit``); command-line entry points
run their ``main`` through :func:`run_cli`, which prints the error as ONE line,
``hvdcourse: error: <what happened and what to do>``, with no traceback, and returns its exit code:

====  =====================================================================================
code  meaning
====  =====================================================================================
0     success
1     the check or the job ran and reports a problem (``hvdcourse-check``: NOT READY, a failed test)
2     the user must fix something: bad input, a missing or corrupt file, a missing tool
      (argparse's own usage errors also exit 2, with the usage line)
3     a run failed or timed out (a rank crashed, a build or a benchmark did not finish)
130   stopped by Ctrl-C
143   stopped by SIGTERM (only the commands that start runs: ``run_cli(..., stop_on_sigterm=True)``)
====  =====================================================================================

The trainers' side of it is taught in (lesson: Faults, hangs and elastic training).
"""

from __future__ import annotations

import signal
import sys
import threading

PREFIX = "hvdcourse: error:"
USER_ERROR = 2
RUN_FAILED = 3


class CourseError(Exception):
    """An error the user can act on; ``str(err)`` says what happened and what to do next."""

    exit_code = USER_ERROR
    #: ``False`` for a rank that only follows another rank's decision to stop: that rank printed the reason
    show = True


class CheckFailed(CourseError):
    """A check ran to the end and found problems (listed above the error line): exit code 1."""

    exit_code = 1


class UsageError(CourseError, ValueError):
    """Bad input that argparse could not catch: a folder that does not exist, a value out of range."""


class MissingToolError(CourseError, RuntimeError):
    """A program the command needs (``mpirun``, ``srun``, ``horovodrun``) is not installed or not on PATH."""


class RunFailed(CourseError, RuntimeError):
    """A run started but did not succeed: a rank crashed, a build or benchmark failed."""

    exit_code = RUN_FAILED


class RunTimeout(RunFailed):
    """A run was stopped because it went past its time limit."""


class StoppedWithRank0(CourseError):
    """This rank stops because rank 0 hit ``error`` (rank 0 prints it; the others stay quiet)."""

    show = False

    def __init__(self, error: CourseError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


def error_line(err: BaseException) -> str:
    """``hvdcourse: error: <message>`` on one line (a message of several lines is joined)."""
    text = " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
    return f"{PREFIX} {text or type(err).__name__}"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a cancelled Slurm job, ``kill``, a CI timeout) in a command that stops like Ctrl-C."""


def _raise_terminated(signum, frame):
    raise Terminated()


def run_cli(main, argv=None, *, stop_on_sigterm: bool = False, **kwargs) -> int:
    """Run an entry point's ``main(argv, **kwargs)``; a :class:`CourseError` becomes one line and its code.

    Other exceptions are bugs and keep their traceback; Ctrl-C exits with 130 and one line.
    ``stop_on_sigterm``: SIGTERM stops ``main`` as Ctrl-C does (exit 143), so that the ``finally``
    blocks of what it runs end the processes they started (:func:`hvdcourse.runtime.launch.run_ranks`
    starts the ranks in their own session, where a signal to this process does not reach them).
    For the commands that start and wait for runs, not for the ranks themselves: a rank waiting in
    MPI would only see the exception after the call returns.
    """
    previous = None
    if stop_on_sigterm and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return main(argv, **kwargs)
    except CourseError as err:
        if err.show:
            print(error_line(err), file=sys.stderr, flush=True)
        return err.exit_code
    except Terminated:
        print(f"{PREFIX} terminated (SIGTERM)", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print(f"{PREFIX} interrupted", file=sys.stderr, flush=True)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
