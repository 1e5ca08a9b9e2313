"""The rank side of exercises 1-4: collectives, the global mean, sharding and the ring allreduce.

Trusted code: :mod:`hvdcourse.course.exercises.harness` calls it as ``driver(fn, rank, size, **args)``
inside the rank's own folder (by its name in :mod:`hvdcourse.course.exercises.drivers`); it returns
JSON-able data that the checks of :mod:`hvdcourse.course.exercises.checks_basic` judge.
"""

from __future__ import annotations

import pickle

import numpy as np


# ---------------------------------------------------------------- plain calls (no framework)
def call(fn, rank, size, args=()):
    """``fn(*args, rank, size)`` on this rank, converted to a list of ints."""
    return [int(i) for i in np.asarray(fn(*args, rank, size)).ravel()]


# ---------------------------------------------------------------- Horovod collectives
def global_mean(fn, rank, size, lengths=(3, 7)):
    """``fn(hvd, local_values)`` where ranks hold different numbers of values."""
    import horovod.tensorflow as hvd

    hvd.init()
    local = local_values(rank, lengths)
    return float(np.asarray(fn(hvd, local)))


def local_values(rank, lengths=(3, 7)) -> np.ndarray:
    """The values rank ``rank`` holds in the global-mean exercise (different counts per rank)."""
    n = lengths[rank % len(lengths)]
    return (10.0**rank) * np.arange(1, n + 1, dtype=np.float64)


# ---------------------------------------------------------------- ring allreduce (mpi4py)
class RingComm:
    """A communicator that offers only point-to-point calls and records every message sent."""

    ALLOWED = {
        "Get_rank",
        "Get_size",
        "rank",
        "size",
        "Barrier",
        "barrier",
        "Iprobe",
        "Probe",
        "Recv",
        "recv",
        "Irecv",
        "irecv",
    }
    SENDS = {"Send", "send", "Isend", "isend", "Sendrecv", "sendrecv", "Ssend", "ssend"}

    def __init__(self, comm):
        self._comm = comm
        self.sent = []  # (dest, bytes)

    def __getattr__(self, name):
        if name in self.ALLOWED:
            return getattr(self._comm, name)
        if name in self.SENDS:
            method = getattr(self._comm, name)

            def sending(*args, **kwargs):
                buf = sent_buffer(args, kwargs, ("sendbuf", "buf", "obj", "sendobj"))
                dest = args[1] if len(args) > 1 else kwargs.get("dest")
                self.sent.append((int(dest), message_bytes(buf)))
                return method(*args, **kwargs)

            return sending
        raise AttributeError(
            f"comm.{name} is not available in this exercise: build the allreduce from "
            "point-to-point messages (Sendrecv, or Send and Recv) between ring neighbours"
        )


def sent_buffer(args: tuple, kwargs: dict, names: tuple):
    """What a communicator call sends: its first argument, else the first of the keywords ``names``."""
    return args[0] if args else next((kwargs[k] for k in names if k in kwargs), None)


def message_bytes(buf) -> int:
    """The bytes a rank sends in one message (an array's buffer, or the pickle of an object)."""
    if isinstance(buf, (list, tuple)) and buf and isinstance(buf[0], np.ndarray):
        buf = buf[0]
    if isinstance(buf, np.ndarray):
        return int(buf.nbytes)
    try:
        return int(memoryview(buf).nbytes)
    except TypeError:
        return len(pickle.dumps(buf))


def ring_input(rank, length) -> np.ndarray:
    """Rank ``rank``'s vector in the ring exercise (distinct per rank, exact in float64)."""
    return np.arange(length, dtype=np.float64) + 100.0 * rank + 1.0


def ring(fn, rank, size, length=11):
    """``fn(comm, x)`` with a recording point-to-point communicator."""
    from mpi4py import MPI

    comm = RingComm(MPI.COMM_WORLD)
    x = ring_input(rank, length)
    out = fn(comm, x.copy())
    if out is None:
        raise TypeError("your function returned None: return the summed vector")
    return {"result": np.asarray(out, dtype=np.float64).ravel().tolist(), "sent": comm.sent}
