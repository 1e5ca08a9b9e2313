"""Inject a fault into one rank of a training run (lesson: Faults, hangs and elastic training).

Distributed runs fail in ways a single process never does: one rank raises, is killed by the
out-of-memory killer or its node dies, and the others wait in an allreduce that never completes.
To teach and test what the course does about it, a run can be told to fail on purpose::

    HVDCOURSE_FAIL_RANK=1 HVDCOURSE_FAIL_AT_STEP=8 HVDCOURSE_FAIL_MODE=kill \\
        mpirun -np 2 python -m hvdcourse.course.lessons.faults hvdcourse.examples.train_hvd --epochs 3

``python -m hvdcourse.course.lessons.faults MODULE ARGS`` runs ``MODULE.main(ARGS, callbacks=[...])`` with a
:class:`FaultInjection` callback built from the environment; without ``HVDCOURSE_FAIL_RANK`` it adds
nothing, so the trainers themselves contain no fault-injection code.

``HVDCOURSE_FAIL_MODE``: ``crash`` (raise an exception, the default), ``kill`` (SIGKILL: no clean-up,
like the OOM killer or a lost node), ``exit`` (exit code 3 without Python clean-up) or ``hang``
(stop taking part and sleep: only the stall check can end that).

``HVDCOURSE_FAIL_ONCE=PATH``: fail only if the file ``PATH`` does not exist, and create it (with the
time of the fault) first: a worker that takes the failed one's place later (Horovod Elastic, Ray
Train) does not fail again at the same step.

A rank can also be made a straggler rather than fail (lesson: Watch a training run: Prometheus and a
straggler): ``HVDCOURSE_SLOW_RANK=1 HVDCOURSE_SLOW_FROM_STEP=100 HVDCOURSE_SLOW_SECONDS=0.1`` makes
rank 1 sleep 0.1 s at the start of every step from its 100th on, as a rank held up by a slow disk,
a noisy neighbour or a throttled CPU would be; the others then wait for it in every allreduce.

``HVDCOURSE_PRINT_STATE=1`` adds, on every rank, a callback that prints the rank's training state at
the start of its first step; :func:`compare_resume` uses it to show that a resumed run starts, on
every rank, from rank 0's restored state, and ends as an uninterrupted run does.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass

from hvdcourse.runtime.ranks import launcher_rank
from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import UsageError, run_cli

MODES = ("crash", "kill", "exit", "hang")


class InjectedFault(RuntimeError):
    """The exception raised by mode ``crash``."""


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


def first_time(marker: str | None, record: dict) -> bool:
    """Whether a fault guarded by the file ``marker`` may happen now (always, if ``marker`` is None);
    if so, ``marker`` is written first, holding ``record`` and the time (``time.time()``)."""
    if marker is None:
        return True
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        json.dump({**record, "time": time.time()}, fh)
    return True


def fault_callback(
    rank: int, at_step: int, mode: str = "crash", framework: str = "keras", once: str | None = None
):
    """A callback that makes this process (rank ``rank``) fail after ``at_step`` training steps.

    Steps are counted over all epochs of this process, so ``at_step`` can fall after the first
    checkpoints have been written. ``framework``: ``keras`` (a Keras callback) or ``torch`` (an
    object for the PyTorch trainers' loop, :func:`hvdcourse.examples.torch_training.call_hooks`).
    ``once``: a file path; the fault happens only if it does not exist yet (:func:`first_time`).
    """
    if mode not in MODES:
        raise ValueError(f"unknown fault mode {mode!r}; choose one of {', '.join(MODES)}")

    class Counter:
        steps = 0

        def on_train_batch_end(self, *_args, **_kwargs):
            self.steps += 1
            if self.steps == at_step and first_time(once, {"rank": rank, "step": self.steps}):
                fail(mode, rank, self.steps)

    if framework == "torch":
        return Counter()
    import tensorflow as tf

    class FaultInjection(Counter, tf.keras.callbacks.Callback):
        pass

    return FaultInjection()


def slow_callback(rank: int, from_step: int, seconds: float, framework: str = "keras"):
    """A callback that makes this process (rank ``rank``) a straggler: from training step
    ``from_step`` on (counted over all epochs, from 1), it sleeps ``seconds`` at the start of every step.

    It prints one line when the slowing starts. ``framework`` as in :func:`fault_callback`.
    """

    class Slow:
        steps = 0

        def on_train_batch_begin(self, *_args, **_kwargs):
            self.steps += 1
            if self.steps == from_step:
                print(
                    f"[hvdcourse.faults] rank {rank}: slowed down by {seconds:g} s per step "
                    f"from step {from_step}",
                    flush=True,
                )
            if self.steps >= from_step:
                time.sleep(seconds)

    if framework == "torch":
        return Slow()
    import tensorflow as tf

    class SlowRank(Slow, tf.keras.callbacks.Callback):
        pass

    return SlowRank()


def state_probe_callback(rank: int, framework: str = "keras"):
    """A callback that prints and reports this rank's training state when its first step begins.

    One line: ``[hvdcourse.faults] rank R first step: optimizer_iterations=I weights_sha256=W
    optimizer_sha256=O``, the same digests as the checkpoint's lines (:class:`hvdcourse.examples.training.EpochCheckpoint`,
    :class:`hvdcourse.examples.torch_training.TorchCheckpoint`); the launcher gets them as a record of
    kind ``first_step`` (:func:`hvdcourse.examples.training.report`).
    """
    from hvdcourse.examples import training

    def probe(state: dict) -> None:
        described = " ".join(f"{key}={value}" for key, value in state.items())
        print(f"[hvdcourse.faults] rank {rank} first step: {described}", flush=True)
        training.report("first_step", state)

    if framework == "torch":
        from hvdcourse.examples import torch_training

        class TorchStateProbe:
            printed = False

            def on_train_batch_begin(self, step, model, optimizer):
                if not self.printed:
                    self.printed = True
                    probe(torch_training.training_state(model, optimizer))

        return TorchStateProbe()
    import tensorflow as tf

    class StateProbe(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.printed = False

        def on_train_batch_begin(self, batch, logs=None):
            if self.printed:
                return
            self.printed = True
            # Keras' fit: the compiled model's optimizer; a custom loop passes it in the callbacks' params
            optimizer = getattr(self.model, "optimizer", None) or self.params["optimizer"]
            probe(training.training_state(self.model, optimizer))

    return StateProbe()


def framework_of(module: str) -> str:
    """``torch`` for the course's PyTorch trainers (``train_torch_*``), else ``keras``."""
    return "torch" if module.rsplit(".", 1)[-1].startswith("train_torch") else "keras"


def callbacks_from_env(rank=None, environ=None, framework: str = "keras") -> list:
    """``[FaultInjection]`` as set by the ``HVDCOURSE_FAIL_*`` variables, or ``[]`` when none is set.

    ``rank``: this process's rank (default: the one its launcher announced in the environment).
    With ``HVDCOURSE_PRINT_STATE=1``, a :func:`state_probe_callback` comes first; with
    ``HVDCOURSE_SLOW_RANK``, a :func:`slow_callback` next (on that rank).
    """
    environ = os.environ if environ is None else environ
    me = launcher_rank(environ) if rank is None else rank
    probe = (
        [state_probe_callback(me, framework)]
        if environ.get("HVDCOURSE_PRINT_STATE", "") == "1"
        else []
    )
    probe += _slow_from_env(me, environ, framework)
    target = environ.get("HVDCOURSE_FAIL_RANK", "")
    if not target:
        return probe
    mode = environ.get("HVDCOURSE_FAIL_MODE", "crash")
    try:
        target, at_step = int(target), int(environ.get("HVDCOURSE_FAIL_AT_STEP", "3"))
    except ValueError:
        raise ValueError(
            "HVDCOURSE_FAIL_RANK and HVDCOURSE_FAIL_AT_STEP must be integers, got "
            f"{environ.get('HVDCOURSE_FAIL_RANK')!r} and {environ.get('HVDCOURSE_FAIL_AT_STEP')!r}"
        ) from None
    if mode not in MODES:
        raise ValueError(f"HVDCOURSE_FAIL_MODE={mode!r} is not one of {', '.join(MODES)}")
    once = environ.get("HVDCOURSE_FAIL_ONCE") or None
    return probe + (
        [fault_callback(target, at_step, mode, framework, once)] if me == target else []
    )


def _slow_from_env(me: int, environ, framework: str) -> list:
    """``[slow_callback]`` for this rank as ``HVDCOURSE_SLOW_RANK``, ``HVDCOURSE_SLOW_FROM_STEP`` (default
    1) and ``HVDCOURSE_SLOW_SECONDS`` (default 0.1) say, or ``[]``."""
    target = environ.get("HVDCOURSE_SLOW_RANK", "")
    if not target:
        return []
    try:
        target, from_step = int(target), int(environ.get("HVDCOURSE_SLOW_FROM_STEP", "1"))
        seconds = float(environ.get("HVDCOURSE_SLOW_SECONDS", "0.1"))
    except ValueError:
        raise ValueError(
            "HVDCOURSE_SLOW_RANK and HVDCOURSE_SLOW_FROM_STEP must be integers and "
            "HVDCOURSE_SLOW_SECONDS a number, got "
            f"{environ.get('HVDCOURSE_SLOW_RANK')!r}, {environ.get('HVDCOURSE_SLOW_FROM_STEP')!r} "
            f"and {environ.get('HVDCOURSE_SLOW_SECONDS')!r}"
        ) from None
    return [slow_callback(target, from_step, seconds, framework)] if me == target else []


def run_with_fault(
    trainer_args: list,
    mode: str = "crash",
    rank: int = 1,
    at_step: int = 3,
    np: int = 2,
    launcher: str = "mpirun",
    trainer: str = "hvdcourse.examples.train_hvd",
    timeout: float = 180,
    env: dict | None = None,
    **run_kwargs,
):
    """Run ``trainer`` on ``np`` ranks with a fault on ``rank``; return ``(run, seconds_after_fault)``.

    ``run`` is the :class:`hvdcourse.runtime.launch.RankRun`; ``seconds_after_fault`` is the time from the
    fault to the end of the whole run (``None`` if the fault never happened): the number that shows
    whether a dead rank can hang the others.
    """
    from hvdcourse.runtime.launch import run_ranks

    fault_at = []

    def on_line(line):
        if not fault_at and "[hvdcourse.faults]" in line:
            fault_at.append(time.monotonic())

    env = {
        **(env or {}),
        "HVDCOURSE_FAIL_RANK": str(rank),
        "HVDCOURSE_FAIL_AT_STEP": str(at_step),
        "HVDCOURSE_FAIL_MODE": mode,
    }
    program = [sys.executable, "-m", "hvdcourse.course.lessons.faults", trainer, *trainer_args]
    run = run_ranks(
        program, np=np, launcher=launcher, timeout=timeout, env=env, on_line=on_line, **run_kwargs
    )
    return run, (time.monotonic() - fault_at[0]) if fault_at else None


def final_digests(run) -> dict:
    """``{rank: weights digest}`` that the ranks of a course trainer's run reported at the end."""
    return {r["rank"]: r["weights_sha256"] for r in run.records("final")}


STATE_KEYS = ("optimizer_iterations", "weights_sha256", "optimizer_sha256")


@dataclass
class ResumeComparison:
    """What :func:`compare_resume` ran, and the state the runs reported."""

    uninterrupted: object  # hvdcourse.runtime.launch.RankRun
    killed: object
    resumed: object
    folder: str  # the killed and resumed runs' working folder (their checkpoints are there)
    seconds_after_kill: float | None

    @property
    def uninterrupted_digests(self) -> dict:
        """``{rank: final weights digest}`` of the uninterrupted run."""
        return final_digests(self.uninterrupted)

    @property
    def resumed_digests(self) -> dict:
        """``{rank: final weights digest}`` of the resumed run."""
        return final_digests(self.resumed)

    @property
    def restored(self) -> dict | None:
        """The state rank 0 restored: ``{optimizer_iterations, weights_sha256, optimizer_sha256}``."""
        found = self.resumed.records("restored")
        return {key: found[0][key] for key in STATE_KEYS} if found else None

    @property
    def first_step(self) -> dict:
        """``{rank: state}`` at the resumed run's first step, in the form of :attr:`restored`."""
        return {
            r["rank"]: {key: r[key] for key in STATE_KEYS}
            for r in self.resumed.records("first_step")
        }

    @property
    def exact(self) -> bool:
        """Every rank of both runs ends with the same weights, and the run was really killed."""
        digests = [*self.uninterrupted_digests.values(), *self.resumed_digests.values()]
        return (
            not self.killed.ok
            and self.uninterrupted.ok
            and self.resumed.ok
            and len(digests) >= 2
            and len(self.uninterrupted_digests) == len(self.resumed_digests)
            and len(set(digests)) == 1
        )


def compare_resume(
    trainer_args: list,
    kill_at_step: int,
    trainer: str = "hvdcourse.examples.train_hvd",
    np: int = 2,
    launcher: str = "mpirun",
    rank: int = 1,
    timeout: float = 240,
    cwd: str | None = None,
    env: dict | None = None,
) -> ResumeComparison:
    """Run ``trainer`` uninterrupted, and again killed and resumed; return both runs and their digests.

    Both start from scratch with the same arguments (seeds and data order included). The second
    has ``rank`` killed (SIGKILL) after ``kill_at_step`` steps, then the same command is started
    again in the same folder, resuming from rank 0's last checkpoint, with each rank printing its
    state at its first step (``HVDCOURSE_PRINT_STATE=1``). ``trainer_args`` must name a relative
    ``--checkpoint-dir``: each run works in its own sub-folder of ``cwd`` (default: a new temporary one).
    """
    from hvdcourse.runtime.launch import run_ranks

    cwd = cwd or tempfile.mkdtemp(prefix="hvdcourse-resume-")
    folders = {name: os.path.join(cwd, name) for name in ("uninterrupted", "interrupted")}
    for folder in folders.values():
        os.makedirs(folder, exist_ok=True)
    command = [sys.executable, "-m", trainer, *trainer_args]
    uninterrupted = run_ranks(
        command, np=np, launcher=launcher, timeout=timeout, env=env, cwd=folders["uninterrupted"]
    )
    killed, after_kill = run_with_fault(
        trainer_args,
        mode="kill",
        rank=rank,
        at_step=kill_at_step,
        np=np,
        launcher=launcher,
        trainer=trainer,
        timeout=timeout,
        env=env,
        cwd=folders["interrupted"],
    )
    resumed = run_ranks(
        [sys.executable, "-m", "hvdcourse.course.lessons.faults", trainer, *trainer_args],
        np=np,
        launcher=launcher,
        timeout=timeout,
        env={**(env or {}), "HVDCOURSE_PRINT_STATE": "1"},
        cwd=folders["interrupted"],
    )
    return ResumeComparison(uninterrupted, killed, resumed, folders["interrupted"], after_kill)


def leftover_processes(marker: str, value: str, wait: float = 10.0, exclude=()) -> list:
    """Processes still alive whose environment has ``marker=value``, after waiting up to ``wait`` s.

    A test session (or a notebook) puts a unique marker in its environment; every launcher, rank,
    daemon and engine it starts inherits it, even once orphaned. Whatever still carries the marker
    at the end was left behind. Returns ``[(pid, command line), ...]``.
    """
    deadline = time.monotonic() + wait
    while True:
        found = processes.with_env(marker, value, exclude=exclude)
        if not found or time.monotonic() >= deadline:
            return processes.describe(found)
        time.sleep(0.5)


def kill_processes(pids) -> None:
    """SIGKILL each of ``pids`` (those already gone are skipped)."""
    processes.end(processes.by_pid(pids), grace=0)


def main(argv=None) -> int:
    """``python -m hvdcourse.course.lessons.faults MODULE [ARGS...]``: run a trainer with the faults set in the environment."""
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.lessons.faults",
        description="Run a course trainer (e.g. hvdcourse.examples.train_hvd) with a fault injected on one rank, "
        "as set by HVDCOURSE_FAIL_RANK, HVDCOURSE_FAIL_AT_STEP and HVDCOURSE_FAIL_MODE "
        f"({'|'.join(MODES)}).",
    )
    parser.add_argument(
        "module",
        help="trainer module with main(argv, callbacks), e.g. hvdcourse.examples.train_hvd",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the trainer's own arguments")
    args = parser.parse_args(argv)
    try:
        extra = callbacks_from_env(framework=framework_of(args.module))
        trainer = importlib.import_module(args.module)
    except (ValueError, ImportError) as err:
        raise UsageError(str(err)) from None
    if not hasattr(trainer, "main"):
        raise UsageError(f"module {args.module!r} has no main(argv, callbacks) function")
    from hvdcourse.examples.cli import run_trainer

    return run_trainer(trainer.main, args.args, callbacks=extra)


if __name__ == "__main__":
    sys.exit(run_cli(main))
