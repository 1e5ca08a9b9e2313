"""Ring-allreduce written with mpi4py, and the alpha-beta cost of allreduce algorithms
(lesson: Parameter servers and ring-allreduce).

The ring allreduce of Patarasuk & Yuan (2009), popularised for deep learning by Baidu (Gibiansky 2017)
and adopted by Horovod (Sergeev & Del Balso 2018):

1. cut the array into N chunks (N = number of ranks; chunk sizes differ by at most one element);
2. **reduce-scatter**, N-1 steps: every rank sends one chunk to its right neighbour, receives one
   from its left neighbour and adds it to its own copy; afterwards rank r holds the complete sum of
   chunk (r + 1) mod N;
3. **allgather**, N-1 steps: the completed chunks travel once around the ring, each rank replacing
   its copy, until every rank holds every summed chunk.

2(N-1) steps in all; each rank sends 2(N-1)/N of the array, whatever N: the bandwidth term does not
grow with the number of workers, which is why the ring scales where a parameter server does not.

Run the check on 3 ranks: ``mpirun -np 3 python -m hvdcourse.course.lessons.ring --length 10 --horovod``.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence

import numpy as np


# --------------------------------------------------------------------------- the schedule


def chunk_bounds(length: int, parts: int) -> list:
    """``parts`` contiguous (start, stop) ranges covering ``range(length)``; sizes differ by <= 1.

    The first ``length % parts`` chunks get one element more (as ``numpy.array_split``). With
    ``length < parts`` some chunks are empty, which the ring handles like any other chunk.
    """
    if parts < 1:
        raise ValueError(f"need at least one part, got {parts}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    base, extra = divmod(length, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_schedule(size: int) -> list:
    """Every step of the ring allreduce on ``size`` ranks, as dicts.

    Keys: ``phase`` ("reduce-scatter" or "allgather"), ``step`` (0-based, within the phase),
    ``rank``, ``send`` (index of the chunk sent to the right neighbour), ``recv`` (index of the
    chunk received from the left neighbour). A rank adds what it receives during reduce-scatter
    and overwrites with it during allgather. The MPI implementation and the in-process simulation
    below both follow this one schedule.
    """
    if size < 1:
        raise ValueError(f"need at least one rank, got {size}")
    steps = []
    for step in range(size - 1):
        for rank in range(size):
            steps.append(
                {
                    "phase": "reduce-scatter",
                    "step": step,
                    "rank": rank,
                    "send": (rank - step) % size,
                    "recv": (rank - step - 1) % size,
                }
            )
    for step in range(size - 1):
        for rank in range(size):
            steps.append(
                {
                    "phase": "allgather",
                    "step": step,
                    "rank": rank,
                    "send": (rank - step + 1) % size,
                    "recv": (rank - step) % size,
                }
            )
    return steps


def _steps_of(rank: int, size: int) -> list:
    return [s for s in ring_schedule(size) if s["rank"] == rank]


def _finish(flat: np.ndarray, shape: tuple, size: int, average: bool) -> np.ndarray:
    out = flat.reshape(shape)
    return out / size if average else out


# --------------------------------------------------------------------------- with MPI


def ring_allreduce(comm, array, average: bool = False) -> np.ndarray:
    """Elementwise sum (or mean with ``average=True``) of ``array`` over all ranks of ``comm``.

    Every rank calls it with an array of the same shape and dtype; every rank gets a NEW array
    with the result (the input is not modified). Works for any number of ranks >= 1 and any
    length, divisible by the number of ranks or not. Communication is point-to-point only:
    ``Sendrecv`` to the right neighbour and from the left one, 2(N-1) times.

    Like any collective, it blocks until every rank has called it: a rank that never calls it
    leaves the others waiting forever (in a notebook, only restarting the engines ends that).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    source = np.asarray(array)
    flat = np.array(source, copy=True).reshape(-1)  # contiguous 1-D working copy
    bounds = chunk_bounds(flat.size, size)
    right, left = (rank + 1) % size, (rank - 1) % size
    largest = max(stop - start for start, stop in bounds)
    incoming = np.empty(largest, dtype=flat.dtype)
    for step in _steps_of(rank, size):
        s0, s1 = bounds[step["send"]]
        r0, r1 = bounds[step["recv"]]
        received = incoming[: r1 - r0]
        comm.Sendrecv(
            sendbuf=flat[s0:s1],
            dest=right,
            sendtag=step["step"],
            recvbuf=received,
            source=left,
            recvtag=step["step"],
        )
        if step["phase"] == "reduce-scatter":
            flat[r0:r1] += received
        else:
            flat[r0:r1] = received
    return _finish(flat, source.shape, size, average)


# --------------------------------------------------------------------------- without MPI


def simulate_ring_allreduce(arrays: Sequence, average: bool = False) -> list:
    """The ring allreduce of ``arrays[r]`` (one array per simulated rank), run in one process.

    Follows :func:`ring_schedule` step by step: all sends of a step happen "at once" (each rank
    sends what it held before the step), exactly as with ``Sendrecv``. Returns one result per rank.
    Useful to trace the algorithm for any N without starting processes.
    """
    size = len(arrays)
    if size < 1:
        raise ValueError("need at least one array")
    shape = np.asarray(arrays[0]).shape
    flats = [np.array(a, copy=True).reshape(-1) for a in arrays]
    if any(f.size != flats[0].size for f in flats):
        raise ValueError("all ranks must contribute arrays of the same size")
    bounds = chunk_bounds(flats[0].size, size)
    schedule = ring_schedule(size)
    for phase in ("reduce-scatter", "allgather"):
        for step in range(size - 1):
            moves = [s for s in schedule if s["phase"] == phase and s["step"] == step]
            sent = {s["rank"]: flats[s["rank"]][slice(*bounds[s["send"]])].copy() for s in moves}
            for s in moves:
                r0, r1 = bounds[s["recv"]]
                received = sent[(s["rank"] - 1) % size]
                if phase == "reduce-scatter":
                    flats[s["rank"]][r0:r1] += received
                else:
                    flats[s["rank"]][r0:r1] = received
    return [_finish(f, shape, size, average) for f in flats]


def ring_trace(size: int) -> list:
    """Who has contributed to what, after every step of the ring on ``size`` ranks.

    Returns a list of (label, table) pairs, starting with the initial state: ``table[rank][chunk]``
    is the sorted tuple of the ranks whose data that rank's copy of that chunk contains. Same
    schedule and same "all sends of a step at once" rule as :func:`simulate_ring_allreduce`.
    """
    held = [[(rank,) for _ in range(size)] for rank in range(size)]
    trace = [("start", [row[:] for row in held])]
    schedule = ring_schedule(size)
    for phase in ("reduce-scatter", "allgather"):
        for step in range(size - 1):
            moves = [s for s in schedule if s["phase"] == phase and s["step"] == step]
            sent = {s["rank"]: held[s["rank"]][s["send"]] for s in moves}
            for s in moves:
                incoming = sent[(s["rank"] - 1) % size]
                mine = held[s["rank"]][s["recv"]]
                held[s["rank"]][s["recv"]] = (
                    tuple(sorted(set(mine) | set(incoming)))
                    if phase == "reduce-scatter"
                    else incoming
                )
            trace.append((f"{phase} step {step + 1}", [row[:] for row in held]))
    return trace


# --------------------------------------------------------------------------- alpha-beta cost model
#
# Hockney's model: sending a message of n bytes costs alpha + n * beta (alpha: latency in s,
# beta: s per byte = 1 / bandwidth). All functions take the message size n in bytes (the size of
# the gradient one worker contributes) and return seconds. Computation (the additions) is ignored:
# on accelerators it is much faster than the network.


def ring_time(n_bytes: float, workers: int, alpha: float, beta: float) -> float:
    """Ring allreduce: 2(N-1) steps of n/N bytes each: 2(N-1)*alpha + 2(N-1)/N * n*beta."""
    _check(workers)
    return 2 * (workers - 1) * alpha + 2 * (workers - 1) / workers * n_bytes * beta


def parameter_server_time(
    n_bytes: float, workers: int, alpha: float, beta: float, servers: int = 1, overlap: bool = False
) -> float:
    """Parameter servers: every worker pushes its gradient and pulls the result.

    The parameters are split evenly over ``servers`` (S) servers, each behind its own link, as in
    Li et al. (OSDI 2014) and BytePS (Jiang et al., OSDI 2020). Per step, the busiest link carries
    max(n, N*n/S) bytes in each direction: a worker's link carries its whole gradient (n out, n in),
    a server's link N shards of n/S; the busiest link also handles max(N, S) messages.

    ``overlap=False``: the push phase, then the pull phase:
    2 * (max(N, S) * alpha + max(n, N*n/S) * beta); one server gives 2N(alpha + n*beta).
    ``overlap=True``: pushes and pulls of different pieces of the gradient share the full-duplex
    links at the same time (BytePS cuts tensors into pieces for this): the bandwidth term becomes
    max(n, N*n/S) * beta, the max(M/B, nM/(kB)) of the BytePS paper. With S >= N servers that is
    n*beta, below the ring's 2(N-1)/N * n*beta.
    """
    _check(workers)
    if servers < 1:
        raise ValueError(f"need at least one server, got {servers}")
    busiest_bytes = max(n_bytes, workers * n_bytes / servers)
    latency = 2 * max(workers, servers) * alpha
    return latency + (1 if overlap else 2) * busiest_bytes * beta


def byteps_time(n_bytes: float, gpu_machines: int, cpu_machines: int, beta: float) -> float:
    """Bandwidth term of BytePS's optimal split between k CPU machines and n GPU machines.

    Theorem 1 of Jiang et al. (OSDI 2020): 2n(n-1) * M * beta / (n^2 + k*n - 2k). k = 0 gives the
    ring allreduce's 2(n-1)/n * M * beta; k = n gives the parameter servers' M * beta (overlapped).
    Latency is ignored, as in the paper.
    """
    _check(gpu_machines)
    n, k = gpu_machines, cpu_machines
    if not 0 <= k <= n:
        raise ValueError(
            f"the formula holds for 0 <= CPU machines <= GPU machines, got k={k}, n={n}"
        )
    if n == 1:
        return 0.0
    return 2 * n * (n - 1) * n_bytes * beta / (n * n + k * n - 2 * k)


def naive_time(n_bytes: float, workers: int, alpha: float, beta: float) -> float:
    """Reduce to one root, then broadcast, sequentially: 2(N-1) * (alpha + n*beta)."""
    _check(workers)
    return 2 * (workers - 1) * (alpha + n_bytes * beta)


def tree_time(n_bytes: float, workers: int, alpha: float, beta: float) -> float:
    """Binomial-tree reduce then broadcast of the whole message: 2 ceil(log2 N) (alpha + n*beta)."""
    _check(workers)
    return 2 * math.ceil(math.log2(workers)) * (alpha + n_bytes * beta)


def sharded_servers_time(n_bytes: float, workers: int, alpha: float, beta: float) -> float:
    """As many parameter servers as workers, pushes and pulls overlapped (BytePS with k = n)."""
    return parameter_server_time(n_bytes, workers, alpha, beta, servers=workers, overlap=True)


ALGORITHMS: dict = {
    "ring": ring_time,
    "parameter server": parameter_server_time,
    "parameter servers, S = N, overlapped": sharded_servers_time,
    "naive (reduce + broadcast)": naive_time,
    "binomial tree": tree_time,
}


def ring_bytes_sent(n_bytes: float, workers: int) -> float:
    """Bytes each rank sends in a ring allreduce: 2(N-1)/N * n (tends to 2n, never more)."""
    _check(workers)
    return 2 * (workers - 1) / workers * n_bytes


def ring_steps(workers: int) -> int:
    """Communication steps of the ring allreduce: 2(N-1)."""
    _check(workers)
    return 2 * (workers - 1)


def cost_table(
    n_bytes: float, workers: Sequence, alpha: float, beta: float, algorithms: dict | None = None
) -> dict:
    """{algorithm name: [seconds for each N in ``workers``]} for the given message size."""
    algorithms = ALGORITHMS if algorithms is None else algorithms
    return {
        name: [float(f(n_bytes, int(n), alpha, beta)) for n in workers]
        for name, f in algorithms.items()
    }


def fit_alpha_beta(cost, n_bytes: Sequence, workers: Sequence, seconds: Sequence) -> dict:
    """The alpha and beta for which ``cost`` (a function of this module) best matches measured times.

    Every cost model here is linear in alpha and beta: ``cost(n, N, alpha, beta) = a alpha + b beta``
    with ``a = cost(n, N, 1, 0)`` and ``b = cost(n, N, 0, 1)``. Least squares on the relative errors
    ``(model - measured) / measured``, so that a 4 KiB and a 16 MiB message count alike, with alpha
    and beta kept >= 0. Returns ``alpha`` (s), ``beta`` (s/byte) and ``median_relative_error``.
    """
    from scipy.optimize import nnls

    t = np.asarray(seconds, dtype=float)
    if len(t) < 2 or not (len(t) == len(n_bytes) == len(workers)) or (t <= 0).any():
        raise ValueError("need at least 2 measured times, all > 0, one per message size and N")
    design = np.array(
        [[cost(n, int(w), 1.0, 0.0), cost(n, int(w), 0.0, 1.0)] for n, w in zip(n_bytes, workers)]
    )
    (alpha, beta), _ = nnls(design / t[:, None], np.ones_like(t))
    model = design @ [alpha, beta]
    return {
        "alpha": float(alpha),
        "beta": float(beta),
        "median_relative_error": float(np.median(np.abs(model - t) / t)),
    }


def _check(workers: int) -> None:
    if workers < 1:
        raise ValueError(f"need at least one worker, got {workers}")


# --------------------------------------------------------------------------- command line check


def rank_data(rank: int, length: int, dtype: str = "float64") -> np.ndarray:
    """Deterministic test data of rank ``rank`` (every rank can compute every other rank's)."""
    rng = np.random.default_rng(1000 + rank)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(-100, 100, size=length).astype(dtype)
    return rng.standard_normal(length).astype(dtype)


def main(argv=None) -> int:
    """Check ring_allreduce on the ranks of this MPI job against numpy (and Horovod)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--length", type=int, default=10, help="elements per rank (default 10)")
    parser.add_argument("--dtype", default="float64", help="numpy dtype (default float64)")
    parser.add_argument(
        "--average", action="store_true", help="check the average instead of the sum"
    )
    parser.add_argument(
        "--horovod",
        action="store_true",
        help="also compare with hvd.allreduce (Horovod must be built with MPI)",
    )
    args = parser.parse_args(argv)

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = rank_data(rank, args.length, args.dtype)
    ours = ring_allreduce(comm, mine, average=args.average)
    expected = np.sum([rank_data(r, args.length, args.dtype) for r in range(size)], axis=0)
    if args.average:
        expected = expected / size
    ok = bool(np.allclose(ours, expected, rtol=1e-12, atol=1e-12)) and ours.shape == mine.shape
    line = f"[ring] rank={rank} size={size} length={args.length} numpy_match={ok}"
    if args.horovod:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()  # picks up the MPI_COMM_WORLD that mpi4py initialised
        op = hvd.Average if args.average else hvd.Sum
        theirs = hvd.allreduce(tf.constant(mine), op=op, name="ring_check").numpy()
        hvd_ok = bool(np.allclose(ours, theirs, rtol=1e-12, atol=1e-12))
        line += f" horovod_match={hvd_ok} horovod_size={hvd.size()}"
        ok = ok and hvd_ok and hvd.size() == size
    sys.stdout.write(line + "\n")  # one write: lines of different ranks do not interleave
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
