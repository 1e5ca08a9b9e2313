"""Allreduce bandwidth between the ranks of a job, as NCCL's tests report it: ``hvdcourse-check
--allreduce-bandwidth`` (lesson: Parameter servers and ring-allreduce).

Run it with one rank per node (or per GPU) across the nodes whose network you want to know::

    srun --nodes=4 --ntasks-per-node=1 hvdcourse-check --allreduce-bandwidth
    horovodrun -np 2 -H node1:1,node2:1 hvdcourse-check --allreduce-bandwidth

Every rank allreduces (sums) float32 tensors of each size with Horovod, ``iters`` times after
``warmup`` untimed calls; an operation's time is the slowest rank's mean. Rank 0 prints, per size,
the time, the *algorithm bandwidth* ``algbw = size / time`` and the *bus bandwidth*
``busbw = algbw * 2(n-1)/n``: what each rank's link carries in a ring allreduce, comparable with
the link's own speed whatever the number of ranks (NCCL tests' definitions, ``doc/PERFORMANCE.md``
of github.com/NVIDIA/nccl-tests). It then fits the ring's alpha-beta model,
``t = 2(n-1) alpha + 2(n-1)/n * size * beta``, to the times. Unlike NCCL's tests, each call goes
through Horovod's background thread (negotiation, ``HOROVOD_CYCLE_TIME``): small messages measure
that cost too, as a training step's gradients do.

Tensors are on the rank's GPU when PyTorch sees one and Horovod was built with NCCL (Horovod's GPU
operations), otherwise in host memory (Horovod's MPI or Gloo operations, whichever controller runs).
"""

from __future__ import annotations

import math
import os
import re
import socket
import time

from hvdcourse.runtime.errors import MissingToolError, UsageError

DEFAULT_SIZES = tuple(4096 * 4**k for k in range(8))  # 4 KiB ... 64 MiB
DEFAULT_ITERS = 20
DEFAULT_WARMUP = 5
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str) -> int:
    """``"4K"`` -> 4096, ``"64M"`` -> 67108864, ``"1000"`` -> 1000 (bytes; a multiple of 4: float32)."""
    found = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not found:
        raise UsageError(f"--sizes: {text!r} is not a size (give bytes, or e.g. 4K, 64M)")
    size = int(found.group(1)) * _UNITS[found.group(2).upper()]
    if size < 4 or size % 4:
        raise UsageError(f"--sizes: {text!r} must be a positive multiple of 4 bytes (float32)")
    return size


def parse_sizes(text: str) -> tuple:
    return tuple(parse_size(part) for part in text.split(",") if part.strip())


def format_size(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= _UNITS[unit] and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]} {unit}iB"
    return f"{size} B"


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """NCCL tests' bus bandwidth of an allreduce: ``algbw * 2(n-1)/n`` (0 for one rank: no link)."""
    return algbw * 2 * (ranks - 1) / ranks


def fit_ring_model(sizes, seconds, ranks: int) -> tuple | None:
    """(alpha in s, beta in s/byte) of the ring model fitted to the times (least squares weighted by
    1/t, so that small and large messages count alike); None with one rank or one size. beta is None
    when the times do not grow with the size (latency hides the bandwidth: measure larger sizes)."""
    if ranks < 2 or len(set(sizes)) < 2:
        return None
    import numpy as np

    x = np.asarray(sizes, dtype=float) * 2 * (ranks - 1) / ranks
    t = np.asarray(seconds, dtype=float)
    slope, intercept = np.polyfit(x, t, 1, w=1 / t)
    latency = max(float(intercept), float(t.min()) / 2)  # a noisy fit can give <= 0
    alpha = latency / (2 * (ranks - 1))
    return alpha, (float(slope) if slope > 0 else None)


def measure(sizes=DEFAULT_SIZES, iters: int = DEFAULT_ITERS, warmup: int = DEFAULT_WARMUP) -> dict:
    """On every rank of the job (after ``hvd.init()``): the slowest rank's mean time per allreduce of
    each size. Returns the run's description and ``rows`` (size, seconds, algbw, busbw) on every rank."""
    try:
        import horovod.torch as hvd
        import torch
    except ImportError as err:
        raise MissingToolError(
            f"the bandwidth check runs on Horovod's PyTorch extension, which does not load here "
            f"({str(err).splitlines()[0][:160]}): run it in the course's venv (make env) or, on "
            "GPUs, in the GPU route's (make gpu)"
        ) from None

    hvd.init()
    gpu = torch.cuda.is_available() and hvd.nccl_built()
    if gpu:
        from hvdcourse.runtime.devices import torch_device

        device = torch_device(hvd.local_rank(), hvd.local_size())
        ops = "NCCL"
    else:
        device = torch.device("cpu")
        ops = "MPI" if hvd.mpi_enabled() else "Gloo" if hvd.gloo_enabled() else "?"

    def sync():
        if gpu:
            torch.cuda.synchronize(device)

    # Slurm's node name where there is one (the course's local cluster runs its nodes on one machine)
    hosts = hvd.allgather_object(os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    rows = []
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
        name = f"bw.{size}"
        for _ in range(warmup):
            hvd.allreduce(tensor, op=hvd.Sum, name=name)
        sync()
        hvd.allreduce(torch.zeros(1), op=hvd.Sum, name="bw.start")  # every rank starts together
        start = time.perf_counter()
        for _ in range(iters):
            hvd.allreduce(tensor, op=hvd.Sum, name=name)
        sync()
        mine = (time.perf_counter() - start) / iters
        seconds = float(hvd.allreduce(torch.tensor([mine]), op=hvd.Max, name=f"bw.time.{size}"))
        algbw = size / seconds
        rows.append((size, seconds, algbw, bus_bandwidth(algbw, hvd.size())))
    return {
        "rank": hvd.rank(),
        "ranks": hvd.size(),
        "nodes": len(set(hosts)),
        "hosts": sorted(set(hosts)),
        "tensors": f"GPU ({torch.cuda.get_device_name(device)})" if gpu else "host memory (CPU)",
        "ops": ops,
        "iters": iters,
        "rows": rows,
    }


def format_gbps(bytes_per_second: float) -> str:
    """GB/s with at least three significant digits and no exponent: a slow link (or a loaded
    machine) must not print a measured rate as 0.000."""
    gbps = bytes_per_second / 1e9
    decimals = 3 if gbps >= 0.1 or gbps <= 0 else min(9, 2 - math.floor(math.log10(gbps)))
    return f"{gbps:.{decimals}f}"


def report_lines(result: dict) -> list:
    """What rank 0 prints: the run, one line per size (nccl-tests' columns), the fitted model."""
    ranks = result["ranks"]
    lines = [
        f"# allreduce (sum, float32) with Horovod: {ranks} rank(s) on {result['nodes']} node(s) "
        f"({', '.join(result['hosts'])}); tensors in {result['tensors']}; {result['ops']} operations; "
        f"{result['iters']} timed calls per size",
        f"# {'size':>10} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}",
    ]
    for size, seconds, algbw, busbw in result["rows"]:
        lines.append(
            f"  {format_size(size):>10} {seconds * 1e6:12.1f} {format_gbps(algbw):>13} "
            f"{format_gbps(busbw):>13}"
        )
    fit = fit_ring_model([r[0] for r in result["rows"]], [r[1] for r in result["rows"]], ranks)
    if fit is None:
        lines.append(
            "# one rank (or one size): no link measured. Start one rank per node on 2 or more nodes, "
            "e.g. srun --nodes=2 --ntasks-per-node=1 hvdcourse-check --allreduce-bandwidth"
        )
    else:
        alpha, beta = fit
        rate = (
            f"{format_gbps(1 / beta)} GB/s"
            if beta
            else "not resolved (the times do not grow with the size: add larger sizes)"
        )
        lines.append(
            f"# ring model t = 2(n-1) alpha + 2(n-1)/n size beta fitted: alpha = {alpha * 1e6:.1f} us, "
            f"1/beta = {rate}; alpha includes Horovod's own cost per call (negotiation, cycle time)"
        )
    return lines


def run(sizes=DEFAULT_SIZES, iters: int = DEFAULT_ITERS, warmup: int = DEFAULT_WARMUP) -> dict:
    """:func:`measure`, then rank 0 prints :func:`report_lines`; returns the result (every rank)."""
    result = measure(sizes, iters, warmup)
    if result["rank"] == 0:
        print("\n".join(report_lines(result)), flush=True)
    return result
