"""The course's benchmark suite, one command (``make bench``; lesson: Measuring performance).

``python -m hvdcourse.course.bench.suite --out book/data/bench`` measures, on this machine, and writes:

* ``throughput.json``: images/s of plain Keras (1 core; both cores), Horovod at 1 rank, Horovod at
  2 ranks over Gloo and over MPI, MultiWorkerMirroredStrategy at 2 workers - same model, data and
  per-rank batch - and where the issue's targets stand;
* ``tuning.json``: the path from a naive 2-rank run to the tuned one, one change at a time, and
  sweeps of threads, binding, HOROVOD_CYCLE_TIME, HOROVOD_FUSION_THRESHOLD, allocator, gradient
  groups, transport and batch size;
* ``allreduce.json``: allreduce bus bandwidth 4 KB - 64 MB (Horovod over Gloo and MPI, mpi4py out of
  place and in place, the course's ring) beside the memory-copy bandwidth;
* ``monitor.json``: CPU, memory and context switches sampled during the naive and the tuned run;
* ``frameworks.json``: PyTorch + Horovod (Gloo, MPI) and PyTorch DDP (Gloo, torchrun) at 1 and 2 ranks,
  beside Keras + Horovod measured in the same run (same model, data and per-rank batch), with the
  ratios: PyTorch+Horovod / DDP at 2 ranks, 2-rank scaling efficiency of each (against its own run at
  1 rank), PyTorch / Keras;
* ``ray.json``: the source benchmark's three tables rerun (:mod:`hvdcourse.course.bench.side_by_side`):
  training time, test accuracy and images/s of Horovod, the framework's own strategy (MWMS, DDP) and
  Ray Train, Keras and PyTorch, at 1 and 2 workers, batch 32 and 128, training runs of the learner
  scripts (2 epochs of at most 30 steps); and Ray Train at 2 workers as a ratio beside each peer;
* ``ray_models.json``: the same six trainers with the source benchmark's own models
  (:mod:`hvdcourse.course.bench.source_models`): ResNet-50 on MNIST and MobileNetV2 on Fashion-MNIST
  (Debian's ``dataset-fashion-mnist``), padded to 32x32, at 1 and 2 workers, batch 32, 2 epochs of a
  few steps;
* ``ps_ring.json``: a parameter-server step, the course's ring and ``hvd.allreduce`` timed on 2, 3 and
  4 ranks over message sizes (:mod:`hvdcourse.course.bench.ps_ring`), for lesson 03's alpha-beta fit;
* ``slurm_scaling.json``: the ELKH Cloud talk's methodology (:mod:`hvdcourse.course.bench.slurm_scaling`):
  ResNet-20 on synthetic CIFAR-shaped data, images/s and scaling efficiency at batch 32 and 196 per
  rank, on 1 and 2 nodes of the local Slurm cluster.

Each file starts with the machine (CPU, cores, memory, OS, versions, date, load average). Every run
goes through :func:`hvdcourse.runtime.launch.run_ranks` (timeouts, no stray processes). ``--quick`` runs a
tiny version (tests); ``--only`` picks parts (``--only frameworks`` measures the PyTorch comparison
alone and leaves the other files as they are; ``--only ray`` the Ray Train comparison). Other work on the machine makes the numbers noisy: the
load average before each run is recorded next to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field

from hvdcourse.course.bench import ps_ring, results, side_by_side, slurm_scaling, source_models
from hvdcourse.runtime import machine
from hvdcourse.course.bench.monitor import CpuMonitor
from hvdcourse.runtime.errors import UsageError, run_cli

PARTS = (
    "main",
    "tuning",
    "allreduce",
    "frameworks",
    "ray",
    "ray_models",
    "ps_ring",
    "slurm_scaling",
)
# modes measured by hvdcourse.course.bench.torch_throughput (the others by ...bench.throughput)
TORCH_MODES = ("torch", "torch-hvd", "ddp")
BATCH = 256  # per-rank batch of the main comparison (the batch sweep shows why)
BATCH_SWEEP = (16, 32, 64, 128, 256, 512)
# a waiting MPI rank yields its core instead of spinning
MPI_YIELDS = {"OMPI_MCA_mpi_yield_when_idle": "1"}
# Horovod looks for ready tensors every 0.1 ms, not 1 ms
MPI_TUNED = {**MPI_YIELDS, "HOROVOD_CYCLE_TIME": "0.1"}
# malloc asks for transparent huge pages: 512x fewer page faults for TensorFlow's and Open MPI's large
# buffers (measured: sweep "allocator")
HUGE_PAGES = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
# let us choose Open MPI's algorithm:
LARGE_MESSAGES = {
    "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
    # 5 = segmented ring: the received part
    "OMPI_MCA_coll_tuned_allreduce_algorithm": "5",
    # is added while in cache
    "OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize": "1048576",
    **HUGE_PAGES,
}


@dataclass
class Config:
    """One benchmark run: what to start, how many ranks, which knobs."""

    label: str
    mode: str = "hvd"  # keras | hvd | mwms | solo | torch | torch-hvd | ddp
    ranks: int = 2
    # python | gloo | mpi | mpirun | torchrun (mwms: started by train_mwms)
    launcher: str = "gloo"
    threads: int = 1  # -1: TensorFlow's default (all cores, per process)
    bind: str = "core"
    taskset: str | None = None  # "0": run under `taskset -c 0`
    data: str = "memory"
    batch: tuple = (BATCH,)
    env: dict = field(default_factory=dict)
    # Horovod: gradients allreduced in this many groups (0: one by one)
    groups: int = 0
    fit_verbose: int = 0
    log_all_ranks: bool = False
    note: str = ""

    def with_(self, label: str, note: str, **changes) -> "Config":
        return dataclasses.replace(self, label=label, note=note, **changes)

    def argv(self, settings: "Settings") -> list:
        args = [
            "--mode",
            self.mode,
            "--label",
            self.label,
            "--threads",
            str(self.threads),
            "--bind",
            self.bind,
            "--data",
            self.data,
            "--batch-size",
            ",".join(map(str, self.batch)),
            "--warmup-steps",
            str(settings.warmup_steps),
            "--repeats",
            str(settings.repeats),
            "--groups",
            str(self.groups),
        ]
        if settings.images_per_repeat:
            args += ["--images-per-repeat", str(settings.images_per_repeat)]
        else:
            args += ["--steps", str(settings.steps)]
        if self.mode in TORCH_MODES:  # no Keras progress bar to show
            return args
        args += ["--fit-verbose", str(self.fit_verbose)]
        return args + (["--log-all-ranks"] if self.log_all_ranks else [])

    def module(self) -> str:
        """The benchmark program that measures this configuration."""
        if self.mode in TORCH_MODES:
            return "hvdcourse.course.bench.torch_throughput"
        return "hvdcourse.course.bench.throughput"

    def key(self) -> tuple:
        """Runs with equal keys measure the same thing: the suite runs them once."""
        return (
            self.mode,
            self.ranks,
            self.launcher,
            self.threads,
            self.bind,
            self.taskset,
            self.data,
            self.batch,
            tuple(sorted(self.env.items())),
            self.groups,
            self.fit_verbose,
            self.log_all_ranks,
        )


@dataclass
class Settings:
    """How long each measurement runs: ``images_per_repeat`` per rank (so every batch size gets about
    the same time), or a fixed number of ``steps`` when it is 0."""

    warmup_steps: int = 10
    images_per_repeat: int = 12288  # about 0.6 s per repeat at one core's speed
    steps: int = 50
    repeats: int = 5
    rounds: int = 5  # the main comparison is launched this many times, round-robin
    timeout: float = 240
    quick: bool = False
    # the niceness the suite ran at (-20: ahead of other work; root only)
    nice: int = 0


# One round: every code path runs once (combining several rounds is tested on its own, without runs).
QUICK = Settings(
    warmup_steps=2, images_per_repeat=0, steps=3, repeats=2, rounds=1, timeout=180, quick=True
)

# ------------------------------------------------------------------------------------------- runs

KERAS_1CORE = Config(
    "keras-1core",
    mode="keras",
    ranks=1,
    launcher="python",
    threads=1,
    bind="none",
    taskset="0",
    env=dict(HUGE_PAGES),
    note="plain Keras, taskset -c 0, 1 intra-op thread: the baseline",
)
HVD_MPI = Config(
    "hvd-2ranks-mpi",
    launcher="mpi",
    env={**MPI_TUNED, **HUGE_PAGES},
    note="horovodrun --mpi; 1 thread per rank, each rank bound to its own core; MPI yields when "
    "idle; 0.1 ms cycle",
)
HVD_GLOO = Config(
    "hvd-2ranks-gloo",
    launcher="gloo",
    env={"HOROVOD_CYCLE_TIME": "0.1", **HUGE_PAGES},
    groups=1,
    note="horovodrun --gloo; 1 thread per rank, each rank bound to its own core; 0.1 ms cycle; "
    "all gradients in one group (one Gloo allreduce per step)",
)

SOLO = Config(
    "keras-2x1core-solo",
    mode="solo",
    launcher="mpirun",
    env={**MPI_YIELDS, **HUGE_PAGES},
    note="2 plain Keras processes side by side, one per core, no communication: the ceiling",
)


def main_configs() -> list:
    return [
        KERAS_1CORE,
        Config(
            "keras-2cores",
            mode="keras",
            ranks=1,
            launcher="python",
            threads=2,
            bind="none",
            env=dict(HUGE_PAGES),
            note="plain Keras using both cores (2 intra-op threads)",
        ),
        HVD_1RANK,
        HVD_GLOO,
        HVD_MPI,
        Config(
            "mwms-2workers",
            mode="mwms",
            launcher="mwms",
            env=dict(HUGE_PAGES),
            note="MultiWorkerMirroredStrategy (gRPC ring), 1 thread per worker, each bound to its own core",
        ),
        SOLO,
    ]


def ladder_configs() -> list:
    """From the naive run to the tuned one, one change at a time (each step keeps the previous ones).

    The naive run is what ``horovodrun -np 2 -H localhost:2 python train.py`` does on a machine with
    MPI installed: MPI, TensorFlow's default threads, no binding, the defaults of Horovod and Keras.
    """
    naive = Config(
        "naive",
        launcher="mpi",
        threads=-1,
        bind="none",
        data="pipeline",
        batch=(32,),
        fit_verbose=1,
        log_all_ranks=True,
        note="horovodrun --mpi defaults: TensorFlow's threads, no binding, MPI "
        "spins, 1 ms cycle, shuffling tf.data pipeline, batch 32, progress bar on every rank",
    )
    quiet = naive.with_(
        "+quiet", "log on rank 0 only, no progress bar", fit_verbose=0, log_all_ranks=False
    )
    one_thread = quiet.with_("+1 thread/rank", "intra-op = 1, inter-op = 1 per rank", threads=1)
    yields = one_thread.with_("+MPI yields", "OMPI_MCA_mpi_yield_when_idle=1", env=dict(MPI_YIELDS))
    cycle = yields.with_("+cycle 0.1 ms", "HOROVOD_CYCLE_TIME=0.1", env=dict(MPI_TUNED))
    bound = cycle.with_("+bind to core", "each rank pinned to its own core", bind="core")
    memory = bound.with_(
        "+in-memory data", "cached batches instead of a shuffling pipeline", data="memory"
    )
    batch = memory.with_(f"+batch {BATCH}", f"{BATCH} images per rank per step", batch=(BATCH,))
    huge = batch.with_(
        "+huge pages", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1", env={**MPI_TUNED, **HUGE_PAGES}
    )
    return [naive, quiet, one_thread, yields, cycle, bound, memory, batch, huge]


def sweep_configs() -> dict:
    """One knob at a time, from the tuned configuration (its own value is the tuned run itself)."""
    return {
        "threads": [
            HVD_MPI.with_(
                "threads=default, no binding", "TensorFlow default threads", threads=-1, bind="none"
            ),
            HVD_MPI.with_("threads=1, bound", "1 thread per rank, bound to a core (tuned)"),
        ],
        "binding": [
            HVD_MPI.with_("bound to a core", "each rank pinned to its own core (tuned)"),
            HVD_MPI.with_("not bound", "ranks free to run on either core", bind="none"),
        ],
        "cycle_time_ms": [
            HVD_MPI.with_("HOROVOD_CYCLE_TIME=0.1", "cycle time 0.1 ms (tuned)"),
            HVD_MPI.with_(
                "HOROVOD_CYCLE_TIME=1 (default)", "Horovod 0.28's default", env=dict(MPI_YIELDS)
            ),
        ],
        "fusion_threshold": [
            HVD_MPI.with_(
                "HOROVOD_FUSION_THRESHOLD=0",
                "fusion off: one allreduce per gradient tensor",
                env={**MPI_TUNED, "HOROVOD_FUSION_THRESHOLD": "0"},
            ),
            HVD_MPI.with_(
                "HOROVOD_FUSION_THRESHOLD=128MB (default)", "all ready gradients in one allreduce"
            ),
        ],
        "allocator": [
            HVD_MPI.with_("hvd-mpi, huge pages", "malloc with transparent huge pages (tuned)"),
            HVD_MPI.with_("hvd-mpi, 4 KB pages", "glibc's default malloc", env=dict(MPI_TUNED)),
            SOLO.with_("solo, huge pages", "the no-communication ceiling, huge pages"),
            SOLO.with_(
                "solo, 4 KB pages",
                "the no-communication ceiling, default malloc",
                env=dict(MPI_YIELDS),
            ),
        ],
        "groups": [
            HVD_MPI.with_(
                "no groups (default)", "each gradient submitted on its own, fused per cycle"
            ),
            HVD_MPI.with_("groups=1", "all gradients submitted as one group", groups=1),
            HVD_GLOO.with_("gloo, groups=1", "Gloo, all gradients as one group (tuned Gloo)"),
            HVD_GLOO.with_("gloo, no groups", "Gloo, each gradient submitted on its own", groups=0),
        ],
        "transport": [
            HVD_GLOO.with_("gloo", "horovodrun --gloo (TCP over loopback)"),
            HVD_MPI.with_(
                "mpi, spins when idle",
                "OpenMPI's default busy polling",
                env={"HOROVOD_CYCLE_TIME": "0.1"},
            ),
            HVD_MPI.with_("mpi, yields when idle", "OMPI_MCA_mpi_yield_when_idle=1 (tuned)"),
        ],
        "batch": [
            KERAS_1CORE.with_(
                "keras-1core batch sweep", "baseline at each batch", batch=BATCH_SWEEP
            ),
            HVD_MPI.with_(
                "hvd-mpi batch sweep",
                "tuned Horovod over MPI at each per-rank batch",
                batch=BATCH_SWEEP,
            ),
            HVD_GLOO.with_(
                "hvd-gloo batch sweep",
                "Horovod over Gloo at each per-rank batch",
                batch=BATCH_SWEEP,
            ),
        ],
        # the main comparison's baseline first (run once, shared), then the pipeline one
        "baselines": [
            KERAS_1CORE,
            KERAS_1CORE.with_(
                "keras-1core pipeline",
                "baseline with the shuffling pipeline",
                data="pipeline",
                batch=(32,),
            ),
        ],
    }


HVD_1RANK = Config(
    "hvd-1rank",
    ranks=1,
    env=dict(HUGE_PAGES),
    note="horovodrun -np 1 --gloo, bound to one core, 1 thread",
)
TORCH_1CORE = Config(
    "torch-1core",
    mode="torch",
    ranks=1,
    launcher="python",
    threads=1,
    bind="none",
    taskset="0",
    env=dict(HUGE_PAGES),
    note="plain PyTorch, taskset -c 0, 1 intra-op thread: PyTorch's baseline",
)
# PyTorch + Horovod with the settings of the Keras runs it stands beside (HVD_1RANK, HVD_GLOO, HVD_MPI)
TORCH_HVD_1RANK = HVD_1RANK.with_(
    "torch-hvd-1rank", "PyTorch + Horovod, horovodrun -np 1 --gloo, 1 thread", mode="torch-hvd"
)
TORCH_HVD_GLOO = HVD_GLOO.with_(
    "torch-hvd-2ranks-gloo",
    "PyTorch + Horovod, horovodrun --gloo; the Keras Gloo run's settings",
    mode="torch-hvd",
)
TORCH_HVD_MPI = HVD_MPI.with_(
    "torch-hvd-2ranks-mpi",
    "PyTorch + Horovod, horovodrun --mpi; the Keras MPI run's settings",
    mode="torch-hvd",
)
DDP_1RANK = Config(
    "ddp-1rank",
    mode="ddp",
    ranks=1,
    launcher="torchrun",
    env=dict(HUGE_PAGES),
    note="DistributedDataParallel over Gloo, torchrun --nproc-per-node 1, 1 thread",
)
DDP_2RANKS = DDP_1RANK.with_(
    "ddp-2ranks",
    "DistributedDataParallel over Gloo (default 25 MB buckets), torchrun --nproc-per-node 2, "
    "1 thread per rank, each rank bound to its own core",
    ranks=2,
)


def framework_configs() -> list:
    """PyTorch + Horovod and DDP at 1 and 2 ranks, and the Keras runs they are compared with."""
    return [
        KERAS_1CORE,
        TORCH_1CORE,
        HVD_1RANK,
        TORCH_HVD_1RANK,
        DDP_1RANK,
        HVD_GLOO,
        HVD_MPI,
        TORCH_HVD_GLOO,
        TORCH_HVD_MPI,
        DDP_2RANKS,
    ]


def quick_configs() -> dict:
    """A handful of tiny runs that exercise every code path of the suite (tests)."""
    return {
        "main": [
            c.with_(c.label, c.note, batch=(8,))
            for c in main_configs()
            if c.label in ("keras-1core", "hvd-2ranks-mpi")
        ],
        "ladder": [ladder_configs()[0].with_("naive", "quick", batch=(8,))],
        "sweeps": {},
        "frameworks": [
            c.with_(c.label, c.note, batch=(8,))
            for c in framework_configs()
            if c.label in ("hvd-2ranks-mpi", "torch-hvd-1rank", "torch-hvd-2ranks-gloo")
            or c.mode == "ddp"
        ],
        # none: each Ray run starts a Ray instance (tens of seconds);
        # tests/examples/test_train_ray.py runs the two Ray scripts,
        # tests/bench/test_side_by_side.py the part on a few quick runs
        "ray": {},
    }


# ------------------------------------------------------------------------------------------- running


def launch(config: Config, settings: Settings):
    """Start ``config``'s processes; return the RankRun."""
    from hvdcourse.runtime.launch import run_ranks
    from hvdcourse.examples.train_mwms import launch_local_workers

    if config.mode == "mwms":
        return launch_local_workers(
            "hvdcourse.course.bench.throughput",
            config.ranks,
            config.argv(settings),
            timeout=settings.timeout,
            env=config.env,
        )
    program = [sys.executable, "-m", config.module(), *config.argv(settings)]
    if config.taskset is not None:
        program = ["taskset", "-c", config.taskset, *program]
    return run_ranks(
        program, np=config.ranks, launcher=config.launcher, timeout=settings.timeout, env=config.env
    )


class Runner:
    """Runs configurations once each (equal keys share a run) and keeps the monitor traces asked for."""

    def __init__(self, settings: Settings, log=print):
        self.settings, self.log = settings, log
        self.cache: dict = {}
        self.traces: dict = {}

    def run(self, config: Config, trace: bool = False, round_: int = 0, series: str = "") -> list:
        """Rows of ``config``'s run; ``series`` names a part whose rounds are launched afresh (not
        shared with the runs of the same configuration in the other parts)."""
        key = (config.key(), round_, series)
        if key not in self.cache:
            load_before = machine.load_average()
            with CpuMonitor(interval=0.25) as monitor:
                run = launch(config, self.settings)
            found = run.results[0] or []  # rank 0 reports one row per batch size
            common = {
                "load_average_before": load_before,
                "wall_seconds_with_launch": round(run.seconds, 1),
                "monitor": monitor.summary(),
                "launcher": config.launcher,
                "taskset": config.taskset,
                "env": config.env,
            }
            if run.ok and found:
                rows = [{**row, **common} for row in found]
            else:
                tail = run.output.strip().splitlines()[-15:]
                rows = [
                    {
                        "error": "timed out" if run.timed_out else f"exit code {run.returncode}",
                        "output_tail": tail,
                        **common,
                    }
                ]
                self.log(f"  ! {config.label}: {rows[0]['error']}\n    " + "\n    ".join(tail[-6:]))
            self.cache[key] = (rows, monitor.samples)
            for row in rows:
                if "median_images_per_s" in row:
                    self.log(
                        f"  {config.label:32s} batch {row['batch_per_rank']:4d}  "
                        f"{row['median_images_per_s']:8.0f} images/s  (load {load_before[0]})"
                    )
        rows, samples = self.cache[key]
        if trace:
            self.traces[config.label] = samples
        return [{**row, "label": config.label, "note": config.note} for row in rows]

    def run_rounds(
        self, configs: list, rounds: int, trace: str | None = None, series: str = ""
    ) -> list:
        """Launch every config ``rounds`` times, round-robin (so slow spells of other work hit all of them);
        each config's result is the median of its launches' medians. Later runs of the same config
        (tuning) reuse this combined result."""
        launches = {c.label: [] for c in configs}
        for round_ in range(rounds):
            for config in configs:
                launches[config.label].append(
                    self.run(
                        config,
                        trace=round_ == 0 and config.label == trace,
                        round_=round_,
                        series=series,
                    )
                )
        out = []
        for config in configs:
            combined = combine_launches(launches[config.label])
            self.cache[(config.key(), 0, series)] = (combined, self.traces.get(config.label, []))
            out += [{**row, "label": config.label, "note": config.note} for row in combined]
        return out


def combine_launches(launches: list) -> list:
    """One row per batch size from several launches of one config: median of the launch medians."""
    import statistics

    rows = []
    for per_batch in zip(*launches):
        ok = [r for r in per_batch if "median_images_per_s" in r]
        if not ok:
            rows.append(per_batch[0])
            continue
        medians = [r["median_images_per_s"] for r in ok]
        rows.append(
            {
                **ok[0],
                "launch_medians": medians,
                "median_images_per_s": statistics.median(medians),
                "images_per_s": [x for r in ok for x in r["images_per_s"]],
                "seconds": [x for r in ok for x in r["seconds"]],
                "load_average_before_each_launch": [r["load_average_before"] for r in ok],
                "failed_launches": len(per_batch) - len(ok),
            }
        )
    return rows


def run_allreduce(settings: Settings, log=print) -> dict:
    from hvdcourse.runtime.launch import run_ranks

    sizes = (
        ["--max-bytes", str(64 * 1024), "--repeats", "2"]
        if settings.quick
        # 4 allreduces per repeat at 64 MB
        else ["--repeats", "5", "--budget-bytes", str(256 * 2**20)]
    )
    sizes += ["--bind", "core"]  # each rank on its own core, as in the throughput runs
    program = [sys.executable, "-m", "hvdcourse.course.bench.allreduce", *sizes]
    launches = [
        ("gloo", ["--impl", "hvd", "--label", "hvd-gloo"], {}),
        ("mpi", ["--impl", "hvd", "--label", "hvd-mpi default"], {}),
        ("mpi", ["--impl", "hvd", "--label", "hvd-mpi"], {**MPI_TUNED, **LARGE_MESSAGES}),
        (
            "mpirun",
            ["--impl", "mpi4py", "--impl", "mpi4py-inplace", "--impl", "ring"],
            {**MPI_TUNED, **LARGE_MESSAGES},
        ),
    ]
    if settings.quick:
        launches = launches[-1:]
    docs = []
    for launcher, args, env in launches:
        load_before = machine.load_average()
        run = run_ranks(program + args, np=2, launcher=launcher, timeout=settings.timeout, env=env)
        found = run.results[0] or []  # rank 0 reports one document per implementation
        if not (run.ok and found):
            log(
                f"  ! allreduce via {launcher} failed: "
                + " | ".join(run.output.strip().splitlines()[-5:])
            )
        for doc in found:
            doc.update({"launcher": launcher, "env": env, "load_average_before": load_before})
            docs.append(doc)
            big = doc["rows"][-1]
            log(
                f"  {doc['label']:10s} {big['bytes'] / 2**20:6.2f} MB: {big['bus_bytes_per_second'] / 1e9:6.2f} GB/s "
                f"bus bandwidth (correct: {doc['correct']})"
            )
    memcopy = machine.memcopy_bandwidth(16 * 2**20 if settings.quick else 256 * 2**20)
    log(f"  memory copy (numpy, one core): {memcopy['bytes_per_second'] / 1e9:.2f} GB/s")
    return {"memcopy": memcopy, "memcopy_both_cores": concurrent_memcopy(settings), "results": docs}


def concurrent_memcopy(settings: Settings) -> dict:
    """Memory-copy bandwidth of each core while both copy at once (do 2 ranks share one memory bus?)."""
    from hvdcourse.runtime.launch import run_ranks

    nbytes = 16 * 2**20 if settings.quick else 256 * 2**20
    code = (
        "import os; from hvdcourse.runtime.machine import memcopy_bandwidth, raise_priority; "
        "from hvdcourse.runtime.ranks import launcher_rank; from hvdcourse.runtime.results import report; "
        "raise_priority(); os.sched_setaffinity(0, {launcher_rank() % os.cpu_count()}); "
        f"from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); report(memcopy_bandwidth({nbytes}, repeats=9))"
    )
    run = run_ranks([sys.executable, "-c", code], np=2, launcher="mpirun", timeout=settings.timeout)
    return {
        "per_core_bytes_per_second": [
            found[0]["bytes_per_second"] for found in run.results if found
        ],
        "bytes": nbytes,
    }


def write(out_dir: str, name: str, doc: dict) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    os.replace(path + ".tmp", path)
    return path


def run_suite(
    out_dir: str,
    parts=PARTS,
    settings: Settings | None = None,
    log=print,
    configs: dict | None = None,
) -> dict:
    """Run the chosen parts, write their JSON files into ``out_dir`` (only theirs: the other files
    stay), return {name: document}. ``configs``: {part: configurations} instead of the suite's own."""
    settings = settings or Settings()
    runner = Runner(settings, log)
    configs = configs or (
        quick_configs()
        if settings.quick
        else {
            "main": main_configs(),
            "ladder": ladder_configs(),
            "sweeps": sweep_configs(),
            "frameworks": framework_configs(),
            "ray_models": {},
            "slurm_scaling": {},
            "ray": {
                "frameworks": side_by_side.KERAS + side_by_side.TORCH,
                "batches": side_by_side.BATCHES,
                "workers": side_by_side.WORKERS,
                "epochs": side_by_side.EPOCHS,
                "max_steps": side_by_side.MAX_STEPS,
            },
        }
    )
    settings = dataclasses.replace(settings, nice=os.getpriority(os.PRIO_PROCESS, 0))
    header = {
        "machine": machine.describe_machine(),
        "settings": dataclasses.asdict(settings),
        "command": "python -m hvdcourse.course.bench.suite " + " ".join(sys.argv[1:]),
    }
    docs, start = {}, time.monotonic()
    if "main" in parts:
        log("throughput: same model, data and per-rank batch")
        rows = runner.run_rounds(configs["main"], settings.rounds, trace=HVD_MPI.label)
        docs["throughput"] = {**header, "results": rows}
        log(results.throughput_table(rows).to_string(index=False))
    if "tuning" in parts:
        log("tuning: from the naive run to the tuned one")
        ladder = [row for c in configs["ladder"] for row in runner.run(c, trace=c.label == "naive")]
        sweeps = {
            name: [row for c in group for row in runner.run(c)]
            for name, group in configs["sweeps"].items()
        }
        docs["tuning"] = {**header, "ladder": ladder, "sweeps": sweeps}
        docs["monitor"] = {**header, "interval_s": 0.25, "runs": runner.traces}
    elif runner.traces:
        docs["monitor"] = {**header, "interval_s": 0.25, "runs": runner.traces}
    if "allreduce" in parts:
        log("allreduce: bus bandwidth beside the memory-copy bound")
        docs["allreduce"] = {**header, **run_allreduce(settings, log)}
    if "frameworks" in parts:
        log("frameworks: PyTorch + Horovod and DDP beside Keras + Horovod, 1 and 2 ranks")
        # launched afresh, interleaved with the PyTorch runs: the same spells of other work hit all
        rows = runner.run_rounds(configs["frameworks"], settings.rounds, series="frameworks")
        ratios = results.framework_ratios(rows)
        docs["frameworks"] = {**header, "results": rows, "ratios": ratios}
        docs["frameworks"]["targets"] = results.framework_targets(ratios)
        log(results.framework_table(rows).to_string(index=False))
        log(results.format_ratios(ratios))
    if "ray" in parts and configs.get("ray"):
        log("ray: Horovod, MWMS/DDP and Ray Train, Keras and PyTorch, 1 and 2 workers, whole runs")
        rows = side_by_side.measure(**configs["ray"], timeout=max(settings.timeout, 600), log=log)
        docs["ray"] = {
            **header,
            "epochs": configs["ray"]["epochs"],
            "max_steps_per_epoch": configs["ray"]["max_steps"],
            "results": rows,
            "ratios": side_by_side.ratios(rows),
        }
        for title, table in side_by_side.tables(docs["ray"]):
            log(f"{title}\n{table.to_string()}")
        log(side_by_side.ratio_table(docs["ray"]).to_string())
    if "ray_models" in parts and "ray_models" in configs:
        log("ray_models: the six trainers with ResNet-50 (MNIST) and MobileNetV2 (Fashion-MNIST)")
        measured = source_models.measure(**configs["ray_models"], log=log)
        docs["ray_models"] = {**header, **measured}
        for title, table in source_models.tables(docs["ray_models"]):
            log(f"{title}\n{table.to_string()}")
    if "slurm_scaling" in parts and "slurm_scaling" in configs:
        log(
            "slurm_scaling: ResNet-20, synthetic CIFAR-shaped data, batch 32 and 196, 1 and 2 nodes"
        )
        docs["slurm_scaling"] = {
            **header,
            **slurm_scaling.measure(**configs["slurm_scaling"], log=log),
        }
    if "ps_ring" in parts:
        log("ps_ring: parameter server, ring and hvd.allreduce on 2-4 ranks")
        docs["ps_ring"] = {**header, **ps_ring.measure(settings.quick, settings.timeout, log)}
    status = results.targets(docs.get("throughput"), docs.get("allreduce"))
    if "throughput" in docs:
        docs["throughput"]["targets"] = status
    # for the log: the targets of the parts that ran (a new list: the throughput document keeps its own)
    measured = "throughput" in docs or "allreduce" in docs
    status = (status if measured else []) + docs.get("frameworks", {}).get("targets", [])
    seconds = round(time.monotonic() - start)
    for name, doc in docs.items():
        doc["machine"]["load_average_at_end"] = machine.load_average()
        doc["suite_seconds"] = seconds
        write(out_dir, name, doc)
    log(
        f"targets (machine: {header['machine']['cpu_model']}, {header['machine']['logical_cores']} cores, "
        f"load at start {header['machine']['load_average_1_5_15min']}):\n"
        + results.format_targets(status)
    )
    log(f"wrote {', '.join(sorted(docs))} into {out_dir} in {time.monotonic() - start:.0f} s")
    return docs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the course's benchmarks and write JSON results."
    )
    parser.add_argument(
        "--out", default=os.path.join("book", "data", "bench"), help="folder for the JSON files"
    )
    parser.add_argument(
        "--only", action="append", choices=PARTS, help="run only this part (repeatable)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny settings (tests): seconds, not minutes"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"launches per configuration of main and frameworks (default {Settings.rounds})",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=None,
        help="run every benchmark process at this niceness, its session's too (default: -20 as "
        "root, else 0): on a shared machine the measurement then gets the cores first",
    )
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, not {args.rounds}")
    settings = QUICK if args.quick else Settings()
    if args.rounds:
        settings = dataclasses.replace(settings, rounds=args.rounds)
    nice = args.nice if args.nice is not None else (-20 if os.geteuid() == 0 else 0)
    if nice:
        # every launched process applies it at start
        os.environ[machine.PRIORITY_VARIABLE] = str(nice)
        applied = machine.raise_priority(nice)
        if "nice" not in applied:
            raise UsageError(
                f"--nice {nice} was refused ({applied.get('nice_error')}); negative values need root"
            )
    run_suite(args.out, tuple(args.only or PARTS), settings)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, stop_on_sigterm=True))
