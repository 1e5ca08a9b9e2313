"""The rank side of exercises 12-14: a column-parallel layer, a pipeline's idle time, gradient accumulation.

Trusted code: :mod:`hvdcourse.course.exercises.harness` calls it as ``driver(fn, rank, size, **args)``
inside the rank's own folder (by its name in :mod:`hvdcourse.course.exercises.drivers`); it returns
JSON-able data that the checks of :mod:`hvdcourse.course.exercises.checks_scale` judge.
"""

from __future__ import annotations

import numpy as np

from hvdcourse.course.exercises.drivers_basic import message_bytes, sent_buffer
from hvdcourse.course.exercises.drivers_training import is_distributed, keras_hvd


# ---------------------------------------------------------------- exercises 12-14 (parallelism at scale)
class CollectiveComm:
    """A communicator that offers rank, size and the allgathers only, and records every call."""

    ALLOWED = {"Get_rank", "Get_size", "rank", "size", "Barrier", "barrier"}
    GATHERS = {"allgather", "Allgather"}

    def __init__(self, comm):
        self._comm = comm
        self.calls = []  # (name, bytes sent by this rank)

    def __getattr__(self, name):
        if name in self.ALLOWED:
            return getattr(self._comm, name)
        if name in self.GATHERS:
            method = getattr(self._comm, name)

            def gathering(*args, **kwargs):
                buf = sent_buffer(args, kwargs, ("sendbuf", "sendobj", "obj"))
                self.calls.append((name, message_bytes(buf)))
                return method(*args, **kwargs)

            return gathering
        raise AttributeError(
            f"comm.{name} is not available in this exercise: the column-parallel layer "
            "needs one allgather (comm.allgather or comm.Allgather)"
        )


def column_inputs(d_in: int = 6, d_out: int = 8, batch: int = 3):
    """The weight, bias and input of the column-parallel exercise (the same on every rank)."""
    rng = np.random.default_rng(12)
    return (
        rng.standard_normal((d_in, d_out)),
        rng.standard_normal(d_out),
        rng.standard_normal((batch, d_in)),
    )


def column_parallel(fns, rank, size, d_in=6, d_out=8, batch=3):
    """``shard_columns(weight, bias, rank, size)``, then ``column_parallel_linear(comm, x, w, b)`` on
    this rank's shard, with a communicator that records its allgathers."""
    from mpi4py import MPI

    shard_columns, column_parallel_linear = fns
    weight, bias, x = column_inputs(d_in, d_out, batch)
    shard = shard_columns(weight.copy(), bias.copy(), rank, size)
    if not (isinstance(shard, tuple) and len(shard) == 2):
        raise TypeError("shard_columns must return a pair (weight_shard, bias_shard)")
    w_shard, b_shard = (np.asarray(a, dtype=np.float64) for a in shard)
    comm = CollectiveComm(MPI.COMM_WORLD)
    out = column_parallel_linear(comm, x.copy(), w_shard.copy(), b_shard.copy())
    if out is None:
        raise TypeError("column_parallel_linear returned None: return the whole output x @ W + b")
    return {"output": np.asarray(out, dtype=np.float64).tolist(), "calls": comm.calls}


def pipeline_idle(fn, rank, size, micro_batches=4, width=64, batch=64):
    """One measured GPipe step of a 2-layer-per-stage pipeline; ``fn(ops, step_time)`` on this stage."""
    from mpi4py import MPI

    from hvdcourse.course.lessons.model_parallel import pipeline

    stages = pipeline.split_stages(pipeline.init_layers(width, 2 * size, seed=0), size)
    rng = np.random.default_rng(1)
    x, target = rng.standard_normal((batch, width)), rng.standard_normal((batch, width))
    step = pipeline.run_pipeline(
        MPI.COMM_WORLD,
        "gpipe",
        stages[rank],
        x if rank == 0 else None,
        target if rank == size - 1 else None,
        micro_batches,
        batch,
        width,
    )
    ops = [(str(op), int(i), float(start), float(end)) for op, i, start, end in step["ops"]]
    answer = fn(list(ops), float(step["step_time"]))
    return {
        "ops": [list(op) for op in ops],
        "step_time": float(step["step_time"]),
        "answer": float(answer),
    }


def accumulation_inputs(rank: int, n: int, features: int = 6):
    """Rank ``rank``'s examples in the accumulation exercise, and the model's initial weights."""
    rng = np.random.default_rng(40 + rank)
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = (x @ np.linspace(1.0, -1.0, features).astype(np.float32) + 0.5 * (rank + 1))[:, None]
    kernel = np.linspace(-0.3, 0.3, features, dtype=np.float32)[:, None]
    return x, y, kernel, np.array([0.2], dtype=np.float32)


def accumulation(fn, rank, size, k=4, micro_batch=4, lr=0.05):
    """``fn(hvd, lr, k) -> optimizer`` on a one-neuron linear model; the weights after every batch."""
    tf, hvd = keras_hvd()
    x, y, kernel, bias = accumulation_inputs(rank, k * micro_batch)
    model = tf.keras.Sequential(
        [tf.keras.layers.Input(shape=(x.shape[1],)), tf.keras.layers.Dense(1)]
    )
    model.layers[0].set_weights([kernel, bias])
    optimizer = fn(hvd, lr, k)
    if optimizer is None:
        raise TypeError("your function returned None: return the optimizer")
    model.compile(optimizer=optimizer, loss="mse")
    seen = []

    class Weights(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append([float(v) for w in model.layers[0].get_weights() for v in np.ravel(w)])

    model.fit(
        x, y, batch_size=micro_batch, epochs=1, shuffle=False, verbose=0, callbacks=[Weights()]
    )
    return {"weights": seen, "distributed": is_distributed(optimizer)}
