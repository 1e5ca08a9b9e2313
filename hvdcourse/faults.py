"""Inject a fault into one rank of a training run (lesson: Faults, hangs and elastic training).

Distributed runs fail in ways a single process never does: one rank raises, is killed by the
out-of-memory killer or its node dies, and the others wait in an allreduce that never completes.
To teach and test what the course does about it, a run can be told to fail on purpose::

    HVDCOURSE_FAIL_RANK=1 HVDCOURSE_FAIL_AT_STEP=8 HVDCOURSE_FAIL_MODE=kill \\
        mpirun -np 2 python -m hvdcourse.faults hvdcourse.train_hvd --epochs 3

``python -m hvdcourse.faults MODULE ARGS`` runs ``MODULE.main(ARGS, callbacks=[...])`` with a
:class:`FaultInjection` callback built from the environment; without ``HVDCOURSE_FAIL_RANK`` it adds
nothing, so the trainers themselves contain no fault-injection code.

``HVDCOURSE_FAIL_MODE``: ``crash`` (raise an exception, the default), ``kill`` (SIGKILL: no clean-up,
like the OOM killer or a lost node), ``exit`` (exit code 3 without Python clean-up) or ``hang``
(stop taking part and sleep: only the stall check can end that).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time

MODES = ("crash", "kill", "exit", "hang")
RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


class InjectedFault(RuntimeError):
    """The exception raised by mode ``crash``."""


def launcher_rank(environ=None) -> int:
    """This process's rank as its launcher announced it (0 when started without one)."""
    environ = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return 0


def fail(mode: str, rank: int, step: int) -> None:
    """Fail now, the way ``mode`` says; print one line naming the rank first."""
    print(f"[hvdcourse.faults] rank {rank}: injecting '{mode}' at step {step}", flush=True)
    sys.stderr.flush()
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "exit":
        os._exit(3)
    if mode == "hang":
        while True:
            time.sleep(3600)
    raise InjectedFault(f"injected crash on rank {rank} at step {step}")


def fault_callback(rank: int, at_step: int, mode: str = "crash"):
    """A Keras callback that makes this process (rank ``rank``) fail after ``at_step`` training steps.

    Steps are counted over all epochs of this process, so ``at_step`` can fall after the first
    checkpoints have been written.
    """
    import tensorflow as tf

    if mode not in MODES:
        raise ValueError(f"unknown fault mode {mode!r}; choose one of {', '.join(MODES)}")

    class FaultInjection(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps == at_step:
                fail(mode, rank, self.steps)

    return FaultInjection()


def callbacks_from_env(rank=None, environ=None) -> list:
    """``[FaultInjection]`` as set by the ``HVDCOURSE_FAIL_*`` variables, or ``[]`` when none is set.

    ``rank``: this process's rank (default: the one its launcher announced in the environment).
    """
    environ = os.environ if environ is None else environ
    target = environ.get("HVDCOURSE_FAIL_RANK", "")
    if not target:
        return []
    mode = environ.get("HVDCOURSE_FAIL_MODE", "crash")
    try:
        target, at_step = int(target), int(environ.get("HVDCOURSE_FAIL_AT_STEP", "3"))
    except ValueError:
        raise ValueError("HVDCOURSE_FAIL_RANK and HVDCOURSE_FAIL_AT_STEP must be integers, got "
                         f"{environ.get('HVDCOURSE_FAIL_RANK')!r} and {environ.get('HVDCOURSE_FAIL_AT_STEP')!r}") from None
    if mode not in MODES:
        raise ValueError(f"HVDCOURSE_FAIL_MODE={mode!r} is not one of {', '.join(MODES)}")
    me = launcher_rank(environ) if rank is None else rank
    return [fault_callback(target, at_step, mode)] if me == target else []


def run_with_fault(trainer_args: list, mode: str = "crash", rank: int = 1, at_step: int = 3, np: int = 2,
                   launcher: str = "mpirun", trainer: str = "hvdcourse.train_hvd", timeout: float = 180,
                   env: dict | None = None, **run_kwargs):
    """Run ``trainer`` on ``np`` ranks with a fault on ``rank``; return ``(run, seconds_after_fault)``.

    ``run`` is the :class:`hvdcourse.launch.RankRun`; ``seconds_after_fault`` is the time from the
    fault to the end of the whole run (``None`` if the fault never happened): the number that shows
    whether a dead rank can hang the others.
    """
    from hvdcourse.launch import run_ranks

    fault_at = []

    def on_line(line):
        if not fault_at and "[hvdcourse.faults]" in line:
            fault_at.append(time.monotonic())

    env = {**(env or {}), "HVDCOURSE_FAIL_RANK": str(rank), "HVDCOURSE_FAIL_AT_STEP": str(at_step),
           "HVDCOURSE_FAIL_MODE": mode}
    program = [sys.executable, "-m", "hvdcourse.faults", trainer, *trainer_args]
    run = run_ranks(program, np=np, launcher=launcher, timeout=timeout, env=env, on_line=on_line, **run_kwargs)
    return run, (time.monotonic() - fault_at[0]) if fault_at else None


def leftover_processes(marker: str, value: str, wait: float = 10.0, exclude=()) -> list:
    """Processes still alive whose environment has ``marker=value``, after waiting up to ``wait`` s.

    A test session (or a notebook) puts a unique marker in its environment; every launcher, rank,
    daemon and engine it starts inherits it, even once orphaned. Whatever still carries the marker
    at the end was left behind. Returns ``[(pid, command line), ...]``.
    """
    import psutil

    skip = {os.getpid(), *exclude}
    deadline = time.monotonic() + wait
    while True:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            if proc.info["pid"] in skip or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            try:
                if proc.environ().get(marker) == value:
                    found.append((proc.info["pid"], " ".join(proc.info["cmdline"] or [])[:200]))
            except (psutil.Error, OSError):  # gone or unreadable meanwhile
                continue
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)


def kill_processes(pids) -> None:
    """SIGKILL each of ``pids`` (those already gone are skipped)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv=None) -> int:
    """``python -m hvdcourse.faults MODULE [ARGS...]``: run a trainer with the faults set in the environment."""
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.faults",
        description="Run a course trainer (e.g. hvdcourse.train_hvd) with a fault injected on one rank, "
                    "as set by HVDCOURSE_FAIL_RANK, HVDCOURSE_FAIL_AT_STEP and HVDCOURSE_FAIL_MODE "
                    f"({'|'.join(MODES)}).")
    parser.add_argument("module", help="trainer module with main(argv, callbacks), e.g. hvdcourse.train_hvd")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the trainer's own arguments")
    args = parser.parse_args(argv)
    try:
        extra = callbacks_from_env()
        trainer = importlib.import_module(args.module)
    except (ValueError, ImportError) as err:
        parser.error(str(err))
    if not hasattr(trainer, "main"):
        parser.error(f"module {args.module!r} has no main(argv, callbacks) function")
    from hvdcourse.cli import run_main
    return run_main(trainer.main, args.args, callbacks=extra)


if __name__ == "__main__":
    sys.exit(main())
