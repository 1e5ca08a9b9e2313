"""Keras + Horovod, PyTorch + Horovod and PyTorch DDP on one problem, at 1 and N ranks (lessons: PyTorch
with Horovod, and DDP; Horovod and Ray Train, side by side).

The three trainers (:mod:`hvdcourse.examples.train_hvd`, :mod:`~hvdcourse.examples.train_torch_hvd`,
:mod:`~hvdcourse.examples.train_torch_ddp`) train the same model on the same data with the same
options (per-rank batch, epochs, ``--max-steps``, learning-rate rule, threads per rank). Each one
is run through :func:`hvdcourse.runtime.launch.run_ranks` with its own launcher, and the table is
built from what every rank reported at the end (its ``final`` record), never from printed lines.

Time is measured the same way for all three: the training loop of each epoch, from its first batch
to its last, without the evaluation, logging and checkpoint that follow; images/s counts the epochs
after the first (the first also pays for start-up: graph tracing, allocators, first negotiations).
The PyTorch trainers measure it themselves (``torch_training.EpochTimer``) and put it into their
``final`` record; the Keras trainers (Horovod, MultiWorkerMirroredStrategy) are run through
:func:`keras_rank_main`, which adds a Keras callback measuring the same span and reporting it (kind
``timing``). :data:`SIDE_BY_SIDE` adds the peers of lesson *Horovod and Ray Train, side by side*:
MWMS, and the two Ray Train scripts, whose driver (one process, started with ``--workers N``) starts
the N workers itself and reports one ``final`` record for the run, timed inside the workers in the
same way.

Command line (one framework, one size; prints the row)::

    python -m hvdcourse.course.lessons.framework_compare --framework torch-hvd -np 2 -- --epochs 2 --max-steps 20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass

from hvdcourse.runtime.machine import PRIORITY_VARIABLE
from hvdcourse.runtime.errors import RunFailed, UsageError, run_cli


@dataclass(frozen=True)
class Framework:
    """How to run one framework's trainer: its label in tables, module and launcher."""

    key: str
    label: str
    module: str
    launcher: str
    # the driver starts the workers (--workers N) and reports the run once (Ray Train)
    driver: bool = False


FRAMEWORKS = {
    f.key: f
    for f in (
        Framework("keras-hvd", "Keras + Horovod", "hvdcourse.examples.train_hvd", "gloo"),
        Framework("torch-hvd", "PyTorch + Horovod", "hvdcourse.examples.train_torch_hvd", "gloo"),
        Framework("torch-ddp", "PyTorch DDP", "hvdcourse.examples.train_torch_ddp", "torchrun"),
    )
}
# the peers of lesson 15 (Horovod and Ray Train, side by side); lesson 09 runs FRAMEWORKS only
SIDE_BY_SIDE = {
    f.key: f
    for f in (
        Framework("keras-mwms", "Keras + MWMS", "hvdcourse.examples.train_mwms", "mpirun"),
        Framework(
            "keras-ray", "Keras + Ray Train", "hvdcourse.examples.train_ray_tf", "python", True
        ),
        Framework(
            "torch-ray", "PyTorch + Ray Train", "hvdcourse.examples.train_ray_torch", "python", True
        ),
    )
}
KNOWN = {**FRAMEWORKS, **SIDE_BY_SIDE}
# Keras trainers that get the epoch timer through keras_rank_main (their module's main)
KERAS_RANK = {"keras-hvd": "train_hvd", "keras-mwms": "train_mwms"}


def lookup(framework) -> Framework:
    """A :class:`Framework` from its key (one of :data:`KNOWN`) or itself."""
    if isinstance(framework, Framework):
        return framework
    if framework not in KNOWN:
        raise UsageError(f"unknown framework {framework!r}; choose one of {', '.join(KNOWN)}")
    return KNOWN[framework]


def program(framework: Framework, train_args, np: int = 1) -> list:
    """The command each rank runs: the trainer itself, or for Keras the trainer with its timer; a
    driver (Ray Train) is one process told to start ``np`` workers."""
    if framework.key in KERAS_RANK:
        trainer = ["--trainer", KERAS_RANK[framework.key]]
        if framework.key == "keras-mwms" and np > 1:  # MWMS: every worker's address, rank = index
            from hvdcourse.examples.train_mwms import local_cluster

            train_args = ["--cluster", ",".join(local_cluster(np)), *train_args]
        return [sys.executable, "-m", __name__, "keras-rank", *trainer, "--", *train_args]
    # the benchmark suite's priority ($HVDCOURSE_BENCH_NICE), applied by the trainer's process itself
    # before it starts anything (Ray's processes, for one, then inherit it)
    run = [__name__, "prioritised"] if os.environ.get(PRIORITY_VARIABLE) else []
    if framework.driver:
        return [sys.executable, "-m", *run, framework.module, "--workers", str(np), *train_args]
    return [sys.executable, "-m", *run, framework.module, *train_args]


def run(framework, np: int, train_args=(), timeout: float = 300, cwd: str | None = None):
    """Run ``framework`` (a key of :data:`FRAMEWORKS` or a :class:`Framework`) on ``np`` ranks.

    Checkpoints go to a folder of their own in ``cwd`` (never resumed: ``--no-resume``); returns the
    :class:`~hvdcourse.runtime.launch.RankRun`.
    """
    from hvdcourse.runtime.launch import run_ranks

    framework = lookup(framework)
    cwd = cwd or tempfile.mkdtemp(prefix="hvdcourse-frameworks-")
    args = [
        *train_args,
        "--no-resume",
        "--checkpoint-dir",
        os.path.join(cwd, f"ckpt-{framework.key}-{np}"),
    ]
    return run_ranks(
        program(framework, args, np),
        np=1 if framework.driver else np,
        launcher=framework.launcher,
        timeout=timeout,
        cwd=cwd,
        env={"TF_CPP_MIN_LOG_LEVEL": "3"},
    )


# what a process below this one is, from its command line; Ray sets its actors' titles ("ray::..."),
# and a Ray worker process not (yet) an actor runs default_worker.py
_KINDS = (
    ("Ray Train controller", ("ray::TrainController", "ray::_TrainController")),
    ("workers", ("ray::RayTrainWorker", "ray::_RayTrainWorker", "ray::TrainWorker")),
    ("Ray daemons", ("ray::DashboardAgent", "ray::RuntimeEnvAgent")),
    ("Ray idle workers", ("ray::IDLE", "default_worker.py")),
    ("Ray Train's other actors", ("ray::",)),
    ("Ray daemons", ("log_monitor", "dashboard", "runtime_env", "monitor.py", "setup_worker.py")),
    ("Ray driver (the script)", ("train_ray_",)),
    ("launcher", ("horovodrun", "mpirun", "orted", "prterun", "torchrun")),
    ("workers", ("hvdcourse.examples.train_", "hvdcourse.course.lessons.framework_compare")),
)
# Ray's two native daemons, known by their program (their arguments name other programs)
_DAEMONS = ("raylet", "gcs_server")


def process_kind(cmdline: str) -> str:
    """The group of :data:`_KINDS` a command line belongs to (``other`` if none)."""
    program = os.path.basename(cmdline.split(" ", 1)[0])
    if program in _DAEMONS:
        return "Ray daemons"
    for kind, marks in _KINDS:
        if any(mark in cmdline for mark in marks):
            return kind
    return "other"


class CPUSampler:
    """CPU seconds (user + system) used by every process below this one while the ``with`` block
    runs, summed by :func:`process_kind` (lesson: Horovod and Ray Train, side by side).

    A thread reads the processes' CPU times every ``interval`` seconds and keeps each process' last
    reading, so a process that ends between two readings loses at most one interval.
    """

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.last: dict = {}  # pid -> (kind, cpu seconds)
        self.series: list = []  # (time, a copy of ``last``)

    def _sample(self):
        import time

        import psutil

        self._read(psutil)
        self.series.append((time.monotonic(), dict(self.last)))

    def _read(self, psutil):
        for proc in psutil.Process().children(recursive=True):
            try:
                with proc.oneshot():  # the kind again each time: a Ray actor sets its title late
                    times = proc.cpu_times()
                    kind = process_kind(" ".join(proc.cmdline()) or proc.name())
                self.last[proc.pid] = (kind, times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue

    def _loop(self):
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def cores_while_busy(self, busy: str = "workers", at_least: float = 1.0) -> dict:
        """Cores each kind used on average over the intervals in which the ``busy`` kind used at
        least ``at_least`` cores (the training's steps, not its start-up), and those intervals' total
        ``seconds``."""
        used: dict = {}
        seconds = 0.0
        for (t0, before), (t1, after) in zip(self.series, self.series[1:]):
            dt = t1 - t0
            if dt <= 0:
                continue
            rates: dict = {}  # each process' CPU in the interval, under its kind at its end
            for pid, (kind, cpu) in after.items():
                rates[kind] = rates.get(kind, 0.0) + (cpu - before.get(pid, (kind, 0.0))[1]) / dt
            if rates.get(busy, 0.0) < at_least:
                continue
            seconds += dt
            for kind, rate in rates.items():
                used[kind] = used.get(kind, 0.0) + max(rate, 0.0) * dt
        if not seconds:
            return {"seconds": 0.0}
        return {"seconds": round(seconds, 1), **{k: round(v / seconds, 3) for k, v in used.items()}}

    def totals(self) -> dict:
        """CPU seconds per kind of process, and the number of processes of each kind."""
        out: dict = {}
        for kind, seconds in self.last.values():
            cpu, count = out.get(kind, (0.0, 0))
            out[kind] = (cpu + seconds, count + 1)
        return {
            kind: {"cpu s": round(c, 1), "processes": n} for kind, (c, n) in sorted(out.items())
        }


def row(framework, np: int, run) -> dict:
    """One line of the table from a finished run: what its ranks reported at the end.

    Raises :class:`~hvdcourse.runtime.errors.RunFailed` (with the run's last lines) when the run failed
    or a rank reported no final record.
    """
    framework = lookup(framework)
    finals = run.records("final")
    expected = 1 if framework.driver else np  # a driver reports the run once
    if not run.ok or len(finals) != expected:
        raise RunFailed(
            f"{framework.label} on {np} rank(s) failed (exit {run.returncode}, "
            f"{len(finals)} of {expected} final records); its last lines:\n{run.output[-1500:]}"
        )
    # the PyTorch trainers time themselves; the Keras timer reports apart (kind "timing")
    first = {**finals[0], **(run.records("timing") or [{}])[0]}
    return {
        "framework": framework.label,
        "ranks": np,
        "images/s": first["images_per_second"],
        "train s": first["train_seconds"],
        "wall s": round(run.seconds, 1),
        "test accuracy": round(first["accuracy"], 4),
        "identical weights": first["identical_weights"]
        if framework.driver  # the workers compared their weights themselves
        else len({f["weights_sha256"] for f in finals}) == 1,
    }


def table(rows):
    """The rows as a table indexed by framework and ranks, with each framework's speed-up over 1 rank.

    ``speed-up`` is images/s at N ranks over images/s at 1 rank of the same framework (missing when
    that framework has no 1-rank row).
    """
    import pandas as pd

    frame = pd.DataFrame(list(rows))
    if frame.empty:
        raise UsageError("no rows to tabulate: run at least one framework first")
    one = frame[frame["ranks"] == 1].set_index("framework")["images/s"]
    frame["speed-up"] = [
        round(r["images/s"] / one[r["framework"]], 2) if r["framework"] in one.index else None
        for _, r in frame.iterrows()
    ]
    order = {f.label: i for i, f in enumerate(KNOWN.values())}
    frame = frame.sort_values(
        ["framework", "ranks"], key=lambda col: col.map(order) if col.name == "framework" else col
    )
    return frame.set_index(["framework", "ranks"])


def compare(np_values=(1, 2), frameworks=tuple(FRAMEWORKS), train_args=(), timeout=300, cwd=None):
    """Run every framework at every size in ``np_values``; returns (table, {(key, np): RankRun})."""
    runs, rows = {}, []
    for key in frameworks:
        for np in np_values:
            runs[key, np] = run(key, np, train_args, timeout=timeout, cwd=cwd)
            rows.append(row(key, np, runs[key, np]))
    return table(rows), runs


# ------------------------------------------------------------------------------------ Keras side
def keras_epoch_timer(images_per_step: int):
    """A Keras callback timing each epoch's training batches (epoch begins to last batch ends); at
    the end of training it reports ``train_seconds`` and ``images_per_second`` (kind ``timing``)."""
    from hvdcourse.examples.training import keras_epoch_timer as timer

    return timer(images_per_step, report_kind="timing")


def keras_rank_main(argv) -> int:
    """What each rank runs for Keras: ``train_hvd.main`` (or ``--trainer train_mwms``'s) with
    :func:`keras_epoch_timer`."""
    import importlib

    from hvdcourse.runtime.machine import raise_priority
    from hvdcourse.examples import cli
    from hvdcourse.runtime.ranks import launcher_size

    raise_priority()  # only if the benchmark suite asked for it ($HVDCOURSE_BENCH_NICE)

    trainer = "train_hvd"
    if argv[:1] == ["--trainer"]:
        trainer, argv = argv[1], argv[2:]
    argv = argv[1:] if argv[:1] == ["--"] else argv
    parser = cli.training_parser(trainer, models=True)
    parser.add_argument("--cluster")  # MWMS: the workers' addresses
    args = parser.parse_args(argv)
    main = importlib.import_module(f"hvdcourse.examples.{trainer}").main
    return main(argv, callbacks=[keras_epoch_timer(args.batch_size * launcher_size())])


def prioritised_main(argv) -> int:
    """``prioritised MODULE ARGS...``: run ``python -m MODULE ARGS...`` at the suite's priority."""
    import runpy

    from hvdcourse.runtime.machine import raise_priority

    raise_priority()  # only if the suite asked for it ($HVDCOURSE_BENCH_NICE)
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keras-rank"]:
        return keras_rank_main(argv[1:])
    if argv[:1] == ["prioritised"]:
        return prioritised_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.lessons.framework_compare",
        description="Run one framework's trainer on N ranks and print its row of the comparison.",
    )
    parser.add_argument("--framework", choices=list(KNOWN), required=True)
    parser.add_argument("-np", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "train_args", nargs=argparse.REMAINDER, help="-- then the trainer's options"
    )
    args = parser.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    result = run(args.framework, args.np, train_args, timeout=args.timeout)
    print(row(args.framework, args.np, result))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, stop_on_sigterm=True))
