"""The GPU check, ``hvdcourse-check --gpu``, and its record (lesson: Installing Horovod).

After the GPU route (``make gpu``, tools/setup_gpu.sh) it reports the GPU(s), driver, CUDA, NCCL and
what Horovod was built with; trains the course's PyTorch CNN on synthetic batches (no data set
needed) for a bounded number of steps at two batch sizes, plain PyTorch on GPU 0 beside Horovod with
one rank per GPU; reads the NCCL phases of Horovod's timeline; on a one-GPU machine it also tries two
ranks on that GPU and says why NCCL refuses them and what to do instead. ``--record FILE`` writes all
of it as a :class:`GpuRecord` (the lessons read ``book/data/gpu_record.json``).

Synthetic batches, not the trainers' MNIST loader: the trainers copy every batch from host memory,
so on a GPU their images/s would measure that copy more than the GPU; the model, optimizer (Adam)
and Horovod's ``DistributedOptimizer`` are the trainers' (``hvdcourse.examples.torch_model``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from hvdcourse.runtime.errors import MissingToolError, RunFailed, UsageError

RECORD_FORMAT = 1
DEFAULT_BATCH_SIZES = (128, 1024)
DEFAULT_STEPS = 50
WARMUP_STEPS = 5
DUPLICATE_GPU = "Duplicate GPU detected"  # NCCL's warning when two ranks share a GPU

# What the lessons and this check say about the GPU route, in one place.
COMMANDS = ("make gpu", ".venv-gpu/bin/hvdcourse-check --gpu --record book/data/gpu_record.json")


def not_run(gpus: int | None = None) -> str:
    """What the course's GPU runs leave out; ``gpus``: the record's GPUs (two or more: rings ran)."""
    if gpus is not None and gpus >= 2:
        return "AMD GPUs with ROCm/RCCL, and TensorFlow on GPUs"
    machine = " (the record's machine has one GPU)" if gpus == 1 else ""
    return f"multi-GPU NCCL rings{machine}, AMD GPUs with ROCm/RCCL, and TensorFlow on GPUs"


# The host-staged build's cost, measured once by the probe of the course's environment notes
# (../shared/ENVIRONMENT.md, "GPU route"), not by this check: quoted, with its source, in the advice.
HOST_STAGED_PROBE = {
    "source": "the probe in the course's environment notes (one NVIDIA H100, 2026-11-23)",
    "images_per_second_per_rank": {128: 13_200, 1024: 74_000},
    "one_rank_nccl_images_per_second": {128: "55k-68k", 1024: "307k"},
}


def one_gpu_advice() -> str:
    """Why two ranks cannot share one GPU under NCCL, and what a learner can do instead."""
    staged = HOST_STAGED_PROBE["images_per_second_per_rank"]
    alone = HOST_STAGED_PROBE["one_rank_nccl_images_per_second"]
    return (
        "Two ranks cannot share one GPU under NCCL: NCCL gives every rank its own device and stops "
        f"a second rank on the same one ('NCCL WARN {DUPLICATE_GPU}', shown by torch as 'invalid "
        "usage'); PyTorch DDP with the NCCL backend is refused the same way. What to do: run one "
        "rank per GPU (a machine or allocation with N GPUs: horovodrun -np N, or srun "
        "--ntasks-per-node=N --gpus-per-task=1); or, to practise with several ranks on one GPU, "
        "build Horovod without HOROVOD_GPU_OPERATIONS, which stages GPU tensors through host "
        "memory with Gloo operations. Its cost, measured by "
        f"{HOST_STAGED_PROBE['source']}, not by this check: {staged[128]:,} images/s per rank at "
        f"batch 128 and {staged[1024]:,} at 1024 with two ranks on the GPU, against {alone[128]} "
        f"and {alone[1024]} for one rank with NCCL."
    )


# --- The record ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Throughput:
    """Images/s at one batch size (per rank): plain PyTorch on GPU 0, and Horovod's ranks summed."""

    batch_size: int
    plain_images_per_second: float
    horovod_images_per_second: float
    horovod_ranks: int


@dataclasses.dataclass
class GpuRecord:
    """What ``hvdcourse-check --gpu --record FILE`` writes: the machine, the build and every figure."""

    date: str  # ISO date of the run
    device: str  # the GPU's name (nvidia-smi), e.g. "NVIDIA H100 80GB HBM3"
    gpus: int
    driver: str
    cuda: str  # torch.version.cuda (the CUDA the build used, from nvcc, is in build["cuda"])
    nccl: str
    torch: str
    python: str
    horovod: str
    built_with: dict  # name -> bool: PyTorch, NCCL, Gloo, MPI, CUDA (Horovod's own report)
    build: dict  # what tools/setup_gpu.sh recorded beside the wheel (seconds, cuda, nccl), or {}
    steps: int
    throughput: list  # of Throughput
    timeline_phases: dict  # phase -> total ms in rank 0's Horovod timeline of the whole Horovod run
    shared_gpu: str  # two ranks on one GPU: what happened, or why it was not tried
    format: int = RECORD_FORMAT

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GpuRecord":
        problems = validate_record(data)
        if problems:
            raise UsageError("not a GPU record: " + "; ".join(problems))
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["throughput"] = [Throughput(**t) for t in data["throughput"]]
        return cls(**values)


_TYPES = {
    "date": str,
    "device": str,
    "gpus": int,
    "driver": str,
    "cuda": str,
    "nccl": str,
    "torch": str,
    "python": str,
    "horovod": str,
    "built_with": dict,
    "build": dict,
    "steps": int,
    "throughput": list,
    "timeline_phases": dict,
    "shared_gpu": str,
    "format": int,
}


def validate_record(data) -> list:
    """The problems of a record (an empty list when it is valid): fields, types, figures."""
    if not isinstance(data, dict):
        return [f"a record is a JSON object, got {type(data).__name__}"]
    problems = [f"missing field {name!r}" for name in _TYPES if name not in data]
    for name, kind in _TYPES.items():
        value = data.get(name)
        if name in data and (not isinstance(value, kind) or isinstance(value, bool)):
            problems.append(f"{name!r} must be {kind.__name__}, got {type(value).__name__}")
    if problems:
        return problems
    if data["format"] != RECORD_FORMAT:
        problems.append(f"format {data['format']}, this code reads format {RECORD_FORMAT}")
    try:
        datetime.date.fromisoformat(data["date"])
    except ValueError:
        problems.append(f"date {data['date']!r} is not an ISO date (YYYY-MM-DD)")
    for name in ("device", "driver", "cuda", "nccl", "torch", "horovod"):
        if not data[name].strip():
            problems.append(f"{name!r} is empty")
    if data["gpus"] < 1 or data["steps"] < 1:
        problems.append("'gpus' and 'steps' must be at least 1")
    for flag in ("PyTorch", "NCCL"):
        if data["built_with"].get(flag) is not True:
            problems.append(f"built_with[{flag!r}] must be true: the GPU route builds it")
    if not data["throughput"]:
        problems.append("'throughput' is empty")
    expected = {f.name for f in dataclasses.fields(Throughput)}
    for i, row in enumerate(data["throughput"]):
        if not isinstance(row, dict) or set(row) != expected:
            problems.append(f"throughput[{i}] must have exactly {sorted(expected)}")
            continue
        for key in ("plain_images_per_second", "horovod_images_per_second"):
            if not isinstance(row[key], (int, float)) or row[key] <= 0:
                problems.append(f"throughput[{i}][{key!r}] must be a positive number")
    sizes = [r.get("batch_size") for r in data["throughput"] if isinstance(r, dict)]
    if len(set(sizes)) != len(sizes):
        problems.append("throughput has a batch size twice")
    for phase, ms in data["timeline_phases"].items():
        if not isinstance(ms, (int, float)) or ms < 0:
            problems.append(f"timeline_phases[{phase!r}] must be a number of ms >= 0")
    return problems


def load_record(path: str) -> GpuRecord | None:
    """The record in ``path``, or None when there is none; a file that is not a valid record is an error."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as fh:
            data = json.load(fh)
    except ValueError as err:
        raise UsageError(
            f"{path} is not JSON ({err}); rerun hvdcourse-check --gpu --record"
        ) from None
    return GpuRecord.from_dict(data)


def write_record(record: GpuRecord, path: str) -> None:
    problems = validate_record(record.to_dict())
    if problems:  # a bug in the check, never written
        raise RunFailed("the GPU record is incomplete: " + "; ".join(problems))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(record.to_dict(), fh, indent=1)
        fh.write("\n")


def lesson_figures(path: str) -> dict | None:
    """The figures the lessons glue, flat, from the record at ``path``; None when the GPU route has
    not been run by the course yet (no record committed)."""
    record = load_record(path)
    if record is None:
        return None
    figures = {
        "gpu_device": record.device,
        "gpu_count": record.gpus,
        "gpu_driver": record.driver,
        "gpu_cuda": record.cuda,
        "gpu_nccl": record.nccl,
        "gpu_torch": record.torch,
        "gpu_date": record.date,
        "gpu_steps": record.steps,
        "gpu_build_seconds": record.build.get("seconds", "not recorded"),
        "gpu_shared": record.shared_gpu,
        "gpu_nccl_phases": ", ".join(
            f"{phase} {ms:.1f} ms"
            for phase, ms in record.timeline_phases.items()
            if "NCCL" in phase
        )
        or "none recorded",
    }
    for row in record.throughput:
        b = row.batch_size
        figures[f"gpu_plain_b{b}"] = round(row.plain_images_per_second)
        figures[f"gpu_hvd_b{b}"] = round(row.horovod_images_per_second)
    return figures


def status_text(path: str) -> str:
    """One paragraph for the lessons: the record's machine and date, or that the route was not run."""
    figures = lesson_figures(path)
    if figures is None:
        return (
            "The GPU route has not been run by the course yet: there is no GPU record "
            f"({os.path.basename(path)}) in the book's data. On a machine with an NVIDIA GPU, run "
            f"`{COMMANDS[0]}`, then `{COMMANDS[1]}`: the second writes the record. Not run here either: "
            f"{not_run()}."
        )
    return (
        f"Run by the course on {figures['gpu_count']} x {figures['gpu_device']} (driver "
        f"{figures['gpu_driver']}, CUDA {figures['gpu_cuda']}, NCCL {figures['gpu_nccl']}, PyTorch "
        f"{figures['gpu_torch']}) on {figures['gpu_date']}. Not run: {not_run(figures['gpu_count'])}."
    )


def lesson_markdown(path: str, brief: bool = False) -> str:
    """Markdown the lessons glue (``{glue:md}``, as ``IPython.display.Markdown``): the record's machine and figures, all read from the
    record at ``path``, or, when there is none, that the GPU route has not been run by the course yet
    and the commands to run it. ``brief``: the status and the throughput table only (lesson: Multi-node training with Slurm)."""
    figures = lesson_figures(path)
    text = status_text(path)
    if figures is None:
        return text
    record = load_record(path)
    ranks = record.throughput[0].horovod_ranks
    lines = [
        text,
        "",
        f"| batch size | plain PyTorch on GPU 0 (images/s) | Horovod, {ranks} rank(s) (images/s) |",
        "|---:|---:|---:|",
    ]
    for row in record.throughput:
        b = row.batch_size
        lines.append(f"| {b} | {figures[f'gpu_plain_b{b}']:,} | {figures[f'gpu_hvd_b{b}']:,} |")
    lines += ["", f"({record.steps} timed steps per batch size, synthetic batches.)"]
    if brief:
        return "\n".join(lines)
    built = ", ".join(name for name, flag in record.built_with.items() if flag)
    lines += [
        "",
        f"Horovod {record.horovod} built with {built}; `make gpu` compiled it in "
        f"{figures['gpu_build_seconds']} s. NCCL's phases in rank 0's timeline: "
        f"{figures['gpu_nccl_phases']}. Two ranks on one GPU: {record.shared_gpu}.",
    ]
    return "\n".join(lines)


# --- The check ----------------------------------------------------------------------------------------


def query_gpus(nvidia_smi: str | None = None) -> list:
    """[(name, driver), ...] from nvidia-smi; raises MissingToolError in one line when there is no GPU."""
    nvidia_smi = nvidia_smi or shutil.which("nvidia-smi")
    if not nvidia_smi:
        raise MissingToolError(
            "no GPU: nvidia-smi not found. Run this on a machine with an NVIDIA GPU (on a cluster: "
            "srun --gpus=1 hvdcourse-check --gpu), after 'make gpu'"
        )
    proc = subprocess.run(
        [nvidia_smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    gpus = [
        tuple(p.strip() for p in line.split(",", 1)) for line in proc.stdout.splitlines() if line
    ]
    if proc.returncode != 0 or not gpus:
        raise MissingToolError(
            "no GPU: nvidia-smi lists no device (run 'nvidia-smi'; on a cluster ask for one: "
            "srun --gpus=1 hvdcourse-check --gpu)"
        )
    return gpus


def horovod_built() -> dict:
    """What the installed Horovod was built with (Horovod's own flags, through its PyTorch API)."""
    try:
        import horovod.torch as hvd
    except ImportError as err:
        raise MissingToolError(
            f"Horovod's PyTorch extension does not load ({str(err).splitlines()[0][:160]}): run "
            "'make gpu' and use its venv (.venv-gpu/bin/hvdcourse-check --gpu)"
        ) from None
    return {
        "PyTorch": True,
        "NCCL": bool(hvd.nccl_built()),
        "Gloo": bool(hvd.gloo_built()),
        "MPI": bool(hvd.mpi_built()),
        "CUDA": bool(hvd.cuda_built()),
    }


def _train_steps(model, optimizer, batch_size: int, steps: int, device) -> float:
    """Images/s of ``steps`` timed steps on one synthetic batch (after a few untimed warm-up steps)."""
    import torch

    from hvdcourse.examples import torch_model

    loss_fn = torch_model.loss_fn()
    x = torch.rand(batch_size, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)

    def step():
        optimizer.zero_grad()  # not set_to_none=True: Horovod 0.28.1's optimizer rejects it
        loss_fn(model(x), y).backward()
        optimizer.step()

    def sync():  # GPU kernels run asynchronously: wait for them before reading the clock
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(WARMUP_STEPS):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return batch_size * steps / (time.perf_counter() - start)


def plain_throughput(batch_size: int, steps: int) -> float:
    """Plain PyTorch on GPU 0: the baseline beside Horovod's ranks."""
    import torch

    from hvdcourse.examples import torch_model

    device = torch.device("cuda", 0)
    model = torch_model.build_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return _train_steps(model, optimizer, batch_size, steps, device)


def rank_main(argv) -> int:
    """One Horovod rank (launched by :func:`check`): its GPU chosen as the trainers choose it
    (:func:`hvdcourse.runtime.devices.torch_device`; the shared-GPU try sets ``HVD_SHARE_GPU=1`` to
    put two ranks on one device), the trainers' model and DistributedOptimizer."""
    import horovod.torch as hvd
    import torch

    from hvdcourse.examples import torch_model, training
    from hvdcourse.runtime.devices import torch_device
    from hvdcourse.runtime.results import report

    p = argparse.ArgumentParser(prog="hvdcourse.course.check.gpu --rank")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch-sizes", required=True)
    args = p.parse_args(argv)
    hvd.init()
    # the CPU only in the tests (check() needs a GPU)
    device = torch_device(hvd.local_rank(), hvd.local_size())
    for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
        model = torch_model.build_model().to(device)
        optimizer = torch.optim.Adam(
            model.parameters(), lr=training.scaled_lr(1e-3, hvd.size(), "adam")
        )
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        rate = _train_steps(model, optimizer, batch_size, args.steps, device)
        total = float(hvd.allreduce(torch.tensor(rate), op=hvd.Sum, name=f"rate{batch_size}"))
        report({"kind": "throughput", "batch_size": batch_size, "images_per_second": total})
    return 0


def _launch(np: int, steps: int, batch_sizes, timeout: float, timeline: str | None, env=None):
    from hvdcourse.runtime.launch import run_ranks

    env = {**(env or {}), **({"HOROVOD_TIMELINE": timeline} if timeline else {})}
    program = [sys.executable, "-m", "hvdcourse.course.check.gpu", "--rank", "--steps", str(steps)]
    program += ["--batch-sizes", ",".join(str(b) for b in batch_sizes)]
    return run_ranks(program, np, "gloo", timeout, env=env)


def nccl_phases(timeline_path: str) -> dict:
    """Total ms per phase of rank 0's timeline (NCCL's phases and Horovod's around them)."""
    from hvdcourse.course.lessons import timeline

    table = timeline.phase_table(timeline.load_events(timeline_path))
    return {phase: round(float(ms), 3) for phase, ms in table["total_ms"].items()}


def _build_info() -> dict:
    """What tools/setup_gpu.sh wrote beside the installed wheel (build.json), or {}."""
    import horovod

    from hvdcourse.runtime.paths import wheel_cache_entry

    path = os.path.join(wheel_cache_entry(horovod.__version__), "build.json")
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def check(steps: int, batch_sizes, timeout: float, record_path: str | None) -> GpuRecord:
    """The GPU check; prints as it goes and returns the record (written when ``record_path``)."""
    gpus = query_gpus()
    import torch

    if not torch.cuda.is_available():
        why = "a CPU build" if torch.version.cuda is None else "unable to see the GPU"
        raise MissingToolError(
            f"PyTorch {torch.__version__} is {why}: run 'make gpu' and this check from its venv "
            "(.venv-gpu/bin/hvdcourse-check --gpu)"
        )
    import horovod

    built = horovod_built()
    # the GPUs this process may use (CUDA_VISIBLE_DEVICES), one rank each; nvidia-smi lists them all
    ranks = torch.cuda.device_count()
    version = torch.cuda.nccl.version()  # a tuple in recent torch, an int (e.g. 2708) in old ones
    nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    print(f"GPU(s)        {ranks} x {gpus[0][0]} (driver {gpus[0][1]})")
    print(f"PyTorch       {torch.__version__} (CUDA {torch.version.cuda}, NCCL {nccl})")
    print(
        f"Horovod       {horovod.__version__}: "
        + "  ".join(f"[{'X' if v else ' '}] {k}" for k, v in built.items())
    )
    if not (built["NCCL"] and built["CUDA"]):
        raise MissingToolError(
            "Horovod was built without NCCL/CUDA: run 'make gpu' and this check from .venv-gpu"
        )
    work = tempfile.mkdtemp(prefix="hvdcourse-gpu-")
    try:
        timeline_path = os.path.join(work, "timeline.json")
        run = _launch(ranks, steps, batch_sizes, timeout, timeline_path)
        rates = {
            r["batch_size"]: r["images_per_second"]
            for r in run.records("throughput")[: len(batch_sizes)]
        }
        if not run.ok or len(rates) != len(batch_sizes):
            tail = "\n    ".join(run.output.strip().splitlines()[-10:])
            raise RunFailed(f"the Horovod run on {ranks} rank(s) failed:\n    {tail}")
        phases = nccl_phases(timeline_path)
        rows = []
        print(
            f"\n{'batch':>6} {'plain PyTorch img/s':>20} {'Horovod img/s':>14}  ({ranks} rank(s), {steps} steps)"
        )
        for b in batch_sizes:
            plain = plain_throughput(b, steps)
            rows.append(Throughput(b, round(plain, 1), round(rates[b], 1), ranks))
            print(f"{b:>6} {plain:>20,.0f} {rates[b]:>14,.0f}")
        print(
            "\nHorovod timeline, rank 0 (total ms per phase): "
            + ", ".join(f"{p} {ms:.1f}" for p, ms in phases.items())
        )
        if ranks == 1:
            shared = _try_shared_gpu(steps, batch_sizes[0], timeout)
            print(f"\nTwo ranks on this one GPU: {shared}\n{one_gpu_advice()}")
        else:
            shared = f"not tried: {ranks} GPUs, one rank each"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record = GpuRecord(
        date=datetime.date.today().isoformat(),
        device=gpus[0][0],
        gpus=ranks,
        driver=gpus[0][1],
        cuda=str(torch.version.cuda),
        nccl=nccl,
        torch=torch.__version__,
        python="%d.%d.%d" % sys.version_info[:3],
        horovod=horovod.__version__,
        built_with=built,
        build=_build_info(),
        steps=steps,
        throughput=rows,
        timeline_phases=phases,
        shared_gpu=shared,
    )
    if record_path:
        write_record(record, record_path)
        print(f"\nrecord written: {record_path}")
    return record


def _try_shared_gpu(steps: int, batch_size: int, timeout: float) -> str:
    """Two Horovod ranks on GPU 0: what NCCL says (one line)."""
    # NCCL prints its warnings (the reason) only at NCCL_DEBUG=WARN or above
    env = {"NCCL_DEBUG": "WARN", "HVD_SHARE_GPU": "1"}  # ask for sharing: NCCL is the one to refuse
    run = _launch(2, steps, [batch_size], min(timeout, 120), None, env=env)
    if run.ok:
        return "ran (this Horovod does not use NCCL for GPU tensors)"
    lines = run.output.splitlines()
    for needle in (DUPLICATE_GPU, "invalid usage"):
        for line in lines:
            if needle in line:
                return "refused by NCCL: " + line.strip()[-200:]
    return f"failed (exit {run.returncode}), without NCCL's '{DUPLICATE_GPU}' in its output"


def parse_batch_sizes(text: str) -> tuple:
    try:
        sizes = tuple(int(b) for b in text.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 2 or min(sizes) < 1 or sizes[0] == sizes[1]:
        raise UsageError(
            f"--batch-sizes {text!r}: give two different positive sizes, e.g. 128,1024"
        )
    return sizes


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        sys.exit(rank_main(sys.argv[2:]))
    sys.exit("usage: hvdcourse-check --gpu (this module's --rank is for the ranks it launches)")
