"""Allreduce micro-benchmark, 4 KB to 64 MB (lesson: Measuring performance).

Times one allreduce of a float32 buffer per size, for each implementation named with ``--impl``:

* ``hvd``: ``horovod.tensorflow.allreduce`` (Gloo or MPI, whichever the launcher chose);
* ``mpi4py``: ``MPI.COMM_WORLD.Allreduce`` on numpy buffers (the MPI library's own algorithm), from one
  buffer into another like ``hvd.allreduce`` (which writes into a new output tensor);
* ``mpi4py-inplace``: the same with ``MPI.IN_PLACE``: the result overwrites the input, which saves the
  MPI library the copy of the input into the output that an out-of-place allreduce starts with;
* ``ring``: the course's ring allreduce, :func:`hvdcourse.course.lessons.ring.ring_allreduce`, over mpi4py;
* ``ps``: a parameter-server step over mpi4py,
  :func:`hvdcourse.course.lessons.parameter_server.parameter_server_allreduce`: rank 0 is the server
  and sums the other ranks' buffers (N - 1 workers), then sends the sum back to each.

Reported as *bus bandwidth*, ``2 (N - 1) / N x bytes / time``: a ring allreduce moves that many
bytes through each rank's link, so bus bandwidth compares directly with a link's (here: memory's)
bandwidth, whatever N is. Rank 0 reports one result per implementation
(:func:`hvdcourse.runtime.results.report`; the caller of ``run_ranks`` finds them in ``RankRun.results[0]``).

Run with e.g. ``horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.course.bench.allreduce --impl hvd``
or ``mpirun -np 2 python -m hvdcourse.course.bench.allreduce --impl mpi4py --impl ring``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

IMPLS = ("hvd", "mpi4py", "mpi4py-inplace", "ring", "ps")
KIB = 1024


def message_sizes(
    min_bytes: int = 4 * KIB, max_bytes: int = 64 * KIB * KIB, factor: int = 4
) -> list:
    """Sizes in bytes from ``min_bytes`` to ``max_bytes``, each ``factor`` times the previous."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 4 <= min_bytes <= max_bytes and factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> float:
    """Bytes/s through each rank's link during a ring allreduce of ``nbytes`` on ``ranks`` ranks."""
    if ranks < 2:
        return nbytes / seconds
    return 2 * (ranks - 1) / ranks * nbytes / seconds


def iterations_for(nbytes: int, budget_bytes: int = 64 * KIB * KIB, most: int = 200) -> int:
    """How many allreduces to time together: many for small messages (timer resolution), few for large."""
    return max(2, min(most, budget_bytes // nbytes))


class _Impl:
    """One allreduce implementation: ``prepare(n)`` returns a callable doing one allreduce of n floats."""

    def __init__(self, name: str):
        self.name = name
        if name == "hvd":
            import horovod.tensorflow as hvd
            import tensorflow as tf

            hvd.init()
            self.hvd, self.tf = hvd, tf
            self.rank, self.size = hvd.rank(), hvd.size()
        else:
            from mpi4py import MPI

            self.mpi = MPI
            self.comm = MPI.COMM_WORLD
            self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def barrier(self) -> None:
        if self.name == "hvd":
            self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum, name="bench_barrier")
        else:
            self.comm.Barrier()

    def prepare(self, count: int):
        import numpy as np

        data = np.full(count, self.rank + 1, dtype=np.float32)
        if self.name == "hvd":
            tensor = self.tf.constant(data)
            hvd, name = self.hvd, f"bench_allreduce_{count}"
            return lambda: hvd.allreduce(tensor, op=hvd.Sum, name=name)
        if self.name == "mpi4py":
            out = np.empty_like(data)
            return lambda: self.comm.Allreduce(data, out, op=self.mpi.SUM)
        # the sums grow to inf over the repeats: same speed on x86
        if self.name == "mpi4py-inplace":
            return lambda: self.comm.Allreduce(self.mpi.IN_PLACE, data, op=self.mpi.SUM)
        if self.name == "ps":
            from hvdcourse.course.lessons.parameter_server import parameter_server_allreduce

            return lambda: parameter_server_allreduce(self.comm, data)
        from hvdcourse.course.lessons.ring import ring_allreduce

        return lambda: ring_allreduce(self.comm, data)

    def allreduce_once(self, data):
        """The sum of ``data`` over all ranks, as a numpy array (used to check correctness)."""
        import numpy as np

        if self.name == "hvd":
            return self.hvd.allreduce(
                self.tf.constant(data), op=self.hvd.Sum, name="bench_check"
            ).numpy()
        if self.name == "mpi4py":
            out = np.empty_like(data)
            self.comm.Allreduce(data, out, op=self.mpi.SUM)
            return out
        if self.name == "mpi4py-inplace":
            out = data.copy()
            self.comm.Allreduce(self.mpi.IN_PLACE, out, op=self.mpi.SUM)
            return out
        if self.name == "ps":
            from hvdcourse.course.lessons.parameter_server import parameter_server_allreduce

            return parameter_server_allreduce(self.comm, data)
        from hvdcourse.course.lessons.ring import ring_allreduce

        return np.asarray(ring_allreduce(self.comm, data.copy()))

    def check(self, count: int = 1000) -> bool:
        """Every rank contributes rank+1: the sum must be 1 + 2 + ... + N everywhere (a fast wrong answer
        is not a result); without the server's 1 for ``ps``, whose server contributes nothing."""
        import numpy as np

        data = np.full(count, self.rank + 1, dtype=np.float32)
        expected = self.size * (self.size + 1) / 2 - (1 if self.name == "ps" else 0)
        return bool(np.allclose(self.allreduce_once(data), expected))


def measure(impl: _Impl, sizes: list, repeats: int, budget_bytes: int) -> list:
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        op = impl.prepare(count)
        op()  # warm-up: negotiation, buffer allocation, connection set-up
        iterations = iterations_for(nbytes, budget_bytes)
        per_op = []
        for _ in range(repeats):
            impl.barrier()
            start = time.perf_counter()
            for _ in range(iterations):
                op()
            per_op.append((time.perf_counter() - start) / iterations)
        seconds = statistics.median(per_op)
        rows.append(
            {
                "bytes": count * 4,
                "iterations": iterations,
                "repeats": repeats,
                "seconds": seconds,
                "bus_bytes_per_second": bus_bandwidth(count * 4, seconds, impl.size),
            }
        )
    return rows


def main(argv=None) -> int:
    from hvdcourse.examples.cli import positive_int

    p = argparse.ArgumentParser(description="Allreduce bus bandwidth from 4 KB to 64 MB.")
    p.add_argument(
        "--impl", action="append", choices=IMPLS, required=True, help="repeat to measure several"
    )
    p.add_argument("--min-bytes", type=positive_int, default=4 * KIB)
    p.add_argument("--max-bytes", type=positive_int, default=64 * KIB * KIB)
    p.add_argument("--factor", type=positive_int, default=4, help="ratio between successive sizes")
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument(
        "--budget-bytes",
        type=positive_int,
        default=64 * KIB * KIB,
        help="bytes reduced per timed repeat (sets the iterations per size)",
    )
    p.add_argument("--label", default=None)
    p.add_argument(
        "--bind",
        choices=("none", "core"),
        default="none",
        help="core: pin each rank to its own core, by local rank (as the throughput benchmark)",
    )
    args = p.parse_args(argv)
    if args.bind == "core":
        from hvdcourse.course.bench.throughput import bind_to_core, local_rank

        bind_to_core(local_rank())  # before Horovod, TensorFlow or MPI start their threads
    from hvdcourse.runtime.machine import raise_priority
    from hvdcourse.runtime import results

    priority = raise_priority()  # only if the suite asked for it ($HVDCOURSE_BENCH_NICE)
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.factor)
    for name in args.impl:
        impl = _Impl(name)
        correct = impl.check()
        rows = measure(impl, sizes, args.repeats, args.budget_bytes)
        if impl.rank == 0:
            big = rows[-1]
            print(
                f"[allreduce] {name}: {big['bytes']} bytes, {big['bus_bytes_per_second'] / 1e9:.2f} GB/s bus "
                f"bandwidth (correct: {correct})",
                flush=True,
            )  # for a person; the caller gets:
            results.report(
                {
                    "impl": name,
                    "label": args.label or name,
                    "ranks": impl.size,
                    "correct": correct,
                    "priority": priority,
                    "bind": args.bind,
                    "rows": rows,
                }
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
