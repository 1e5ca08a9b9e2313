"""Trusted code that runs a learner's function on each rank and reports what happened.

Called by :mod:`hvdcourse.course.exercises.harness` as ``driver(fn, rank, size, **args)`` inside the rank's
own folder; returns JSON-able data that the check in :mod:`hvdcourse.course.exercises.checks` judges. The
drivers observe instead of trusting: they record the learning rate before every batch, the weights
after the first batch and at the end, the metrics before and after the learner's callbacks, and
fingerprints of the examples each rank trained on.
"""

from __future__ import annotations

import hashlib
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
                buf = (
                    args[0]
                    if args
                    else next(
                        (kwargs[k] for k in ("sendbuf", "buf", "obj", "sendobj") if k in kwargs),
                        None,
                    )
                )
                dest = args[1] if len(args) > 1 else kwargs.get("dest")
                self.sent.append((int(dest), _nbytes(buf)))
                return method(*args, **kwargs)

            return sending
        raise AttributeError(
            f"comm.{name} is not available in this exercise: build the allreduce from "
            "point-to-point messages (Sendrecv, or Send and Recv) between ring neighbours"
        )


def _nbytes(buf) -> int:
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


# ---------------------------------------------------------------- Keras + Horovod helpers
def _keras_hvd(threads: int = 1, eager: bool = False):
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd

    if eager:
        _eager(tf)
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf, hvd


def _eager(tf) -> None:
    """Run Keras' train step eagerly instead of tracing it into a graph.

    A check trains for a handful of steps on a tiny model, where tracing the step (autograph, then
    Horovod's allreduce in the graph) is most of the work: 7 CPU s per rank against 1.5 eagerly
    (measured on the exercise 5 driver). What the checks of exercises 5-7 observe (the learning rate
    before each step, the weights after the first step and at the end, the examples, the files, the
    metrics the callbacks see) does not depend on the mode. Not for exercise 14, whose optimizer
    counts steps inside the train step, where graph and eager code can differ.
    """
    tf.config.run_functions_eagerly(True)


def _digest(model) -> str:
    from hvdcourse.examples.model import weights_digest

    return weights_digest(model)


def _current_lr(optimizer) -> float:
    import tensorflow as tf

    lr = optimizer.learning_rate
    if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
        lr = lr(optimizer.iterations)
    return float(tf.keras.backend.get_value(lr))


def _recorder(tf):
    """A callback recording the LR before each batch, weights after the first, logs at epoch end."""

    class Recorder(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.lrs, self.epoch_logs, self.batches, self.first_digest = [], [], 0, None

        def on_train_batch_begin(self, batch, logs=None):
            self.lrs.append(_current_lr(self.model.optimizer))

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1
            if self.batches == 1:
                self.first_digest = _digest(self.model)

        def on_epoch_end(self, epoch, logs=None):
            self.epoch_logs.append({k: float(v) for k, v in (logs or {}).items()})

    return Recorder()


def _is_distributed(optimizer) -> bool:
    """Horovod's DistributedOptimizer is a dynamic subclass carrying its allreduce function."""
    return (
        any(hasattr(optimizer, attr) for attr in ("_allreduce_grads", "_agg_helper"))
        or "horovod" in type(optimizer).__module__
        or "_DistributedOptimizer" in str(type(optimizer).__mro__)
    )


def _toy_data(rank, n=32, features=8, seed=0):
    rng = np.random.default_rng(seed + 100 * rank)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, features).astype(np.float32) + 0.1 * rank)[:, None]
    return x, y


def _toy_model(tf, features=8):
    return tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(features,)),
            tf.keras.layers.Dense(4, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )


def fingerprints(x) -> list:
    """Short hashes of each example (row) of ``x``: which examples a rank trained on."""
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    return [
        hashlib.blake2b(row.tobytes(), digest_size=6).hexdigest() for row in x.reshape(len(x), -1)
    ]


# ---------------------------------------------------------------- the exercises' drivers
def conversion(fn, rank, size, **train_args):
    """``fn(**train_args) -> (model, x_train)``; weights, LR, data and files are observed."""
    import tensorflow as tf

    from hvdcourse.examples import data

    _eager(tf)
    # ranks start different: only a broadcast aligns them
    tf.keras.utils.set_random_seed(1000 + rank)
    recorder = _recorder(tf)
    original_fit = tf.keras.Model.fit

    def observed_fit(self, *args, callbacks=None, **kwargs):
        return original_fit(self, *args, callbacks=list(callbacks or []) + [recorder], **kwargs)

    tf.keras.Model.fit = observed_fit
    returned = fn(**train_args)
    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise TypeError(
            "return (model, x_train): the trained model and the images this rank trained on"
        )
    model, x_train = returned
    result = {
        "digest": _digest(model),
        "first_digest": recorder.first_digest,
        "lrs": recorder.lrs,
        "batches": recorder.batches,
        "distributed": _is_distributed(model.optimizer),
        "examples": fingerprints(x_train),
    }
    if rank == 0:
        full = data.load_mnist(quiet=True)
        result["all_examples"] = fingerprints(data.to_model_inputs(full.x_train, full.y_train)[0])
    return result


def warmup(fn, rank, size, base_lr=0.01, warmup_epochs=2, steps_per_epoch=4, epochs=3):
    """``fn(hvd, base_lr, warmup_epochs, steps_per_epoch) -> (optimizer, callbacks)`` on a toy model."""
    tf, hvd = _keras_hvd(eager=True)
    # same start on every rank: only gradient averaging keeps them equal
    tf.keras.utils.set_random_seed(7)
    model = _toy_model(tf)
    x, y = _toy_data(rank, n=8 * steps_per_epoch)
    returned = fn(hvd, base_lr, warmup_epochs, steps_per_epoch)
    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise TypeError("return a pair (optimizer, callbacks)")
    optimizer, callbacks = returned
    model.compile(optimizer=optimizer, loss="mse")
    recorder = _recorder(tf)
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        callbacks=list(callbacks or []) + [recorder],
    )
    return {
        "lrs": recorder.lrs,
        "digest": _digest(model),
        "distributed": _is_distributed(model.optimizer),
        "steps_per_epoch": steps_per_epoch,
        "optimizer": type(model.optimizer).__name__,
    }


def callbacks(fn, rank, size, checkpoint_dir="checkpoints", epochs=2):
    """``fn(hvd, checkpoint_dir) -> callbacks``; metrics seen before and after them are recorded."""
    tf, hvd = _keras_hvd(eager=True)
    # ranks start different: only a broadcast aligns them
    tf.keras.utils.set_random_seed(1000 + rank)
    model = _toy_model(tf)
    x, y = _toy_data(rank, n=24)
    x_val, y_val = _toy_data(rank, n=16, seed=1)  # each rank validates on its own, different part
    model.compile(
        optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
        loss="mse",
        metrics=["mae"],
    )
    before, after = _recorder(tf), _recorder(tf)
    learner = fn(hvd, checkpoint_dir)
    if learner is None or not hasattr(learner, "__iter__"):
        raise TypeError("return a list of Keras callbacks")
    model.fit(
        x,
        y,
        batch_size=8,
        epochs=epochs,
        shuffle=False,
        verbose=0,
        validation_data=(x_val, y_val),
        callbacks=[before, *learner, after],
    )
    return {
        "before": before.epoch_logs,
        "after": after.epoch_logs,
        "first_digest": after.first_digest,
        "digest": _digest(model),
    }


# ---------------------------------------------------------------- PyTorch + Horovod (exercise 15)
def write_start_checkpoint(path: str, lr: float, seed: int = 7) -> dict:
    """A checkpoint of the course's PyTorch model after one Adam step: ``{"model", "optimizer"}``.

    Returns the digests of its weights and optimizer state, which the check compares with what
    each rank holds before its first step.
    """
    import torch

    from hvdcourse.examples import torch_model

    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = torch_model.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x = torch.rand((8, 1, 28, 28), generator=generator)
    y = torch.randint(0, 10, (8,), generator=generator)
    torch_model.loss_fn()(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    return {
        "weights": torch_model.weights_digest(model),
        "optimizer": torch_model.optimizer_digest(optimizer),
        "entries": len(optimizer.state),
    }


class TorchObserver:
    """Watches a PyTorch training run from outside the learner's code.

    It wraps ``torch_model.build_model`` (each rank's model starts from different weights, and its
    training forward passes are counted), ``torch_model.loss_fn`` (the training losses of each step)
    and registers a global optimizer step pre-hook: at each real step (one that follows a training
    forward pass; Horovod's zero-gradient step inside ``broadcast_optimizer_state`` and the inner
    optimizer's step under ``DistributedOptimizer`` are not counted) it records the learning rate,
    and at the first one the weights and the optimizer state, before they are updated.
    """

    def __init__(self, rank: int):
        self.rank = rank
        self.model = None
        self.forward_pending = False
        self.lrs, self.losses = [], []
        self.first = {}
        self.built = []  # weights digest of each model built, before any training

    def install(self):
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        from hvdcourse.examples import torch_model

        observer, build, make_loss = self, torch_model.build_model, torch_model.loss_fn

        def observed_build(*args, **kwargs):
            model = build(*args, **kwargs)
            generator = torch.Generator().manual_seed(1000 + observer.rank)
            with torch.no_grad():  # ranks start different: only a broadcast aligns them
                for parameter in model.parameters():
                    parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
            model.register_forward_pre_hook(observer._forward)
            observer.model = model
            observer.built.append(torch_model.weights_digest(model))
            return model

        def observed_loss(*args, **kwargs):
            loss = make_loss(*args, **kwargs)

            def compute(*inputs, **options):
                value = loss(*inputs, **options)
                if torch.is_grad_enabled():  # training, not evaluation
                    observer.losses.append(float(value.detach()))
                return value

            return compute

        torch_model.build_model, torch_model.loss_fn = observed_build, observed_loss
        register_optimizer_step_pre_hook(self._step)

    def _forward(self, module, inputs):
        if module.training:
            self.forward_pending = True

    def _step(self, optimizer, args, kwargs):
        from hvdcourse.examples import torch_model

        if not self.forward_pending:
            return
        self.forward_pending = False
        self.lrs.append(float(optimizer.param_groups[0]["lr"]))
        if len(self.lrs) == 1:
            names = getattr(optimizer, "_parameter_names", None)
            self.first = {
                "weights": torch_model.weights_digest(self.model) if self.model else None,
                "optimizer": torch_model.optimizer_digest(optimizer),
                "entries": len(optimizer.state),
                "distributed": names is not None,
                "names": sorted(str(n) for n in names.values()) if names else [],
            }


def torch_conversion(fn, rank, size, resume_from="start.pt", **train_args):
    """``fn(**train_args, resume_from=...) -> (model, loader, metrics)`` on each rank, observed.

    Only rank 0's folder holds ``resume_from`` (as a checkpoint on rank 0's local disk would be):
    the learner restores it on rank 0 and broadcasts. What comes back: the weights and optimizer
    state before the first step, the learning rate of every step, the losses, the indices the
    loader's sampler gives this rank in an epoch, the final weights and the returned metrics.
    """
    import torch

    from hvdcourse.examples import torch_model

    start = write_start_checkpoint(resume_from, train_args.get("lr", 1e-3)) if rank == 0 else None
    observer = TorchObserver(rank)
    observer.install()
    returned = fn(resume_from=resume_from, **train_args)
    if not (isinstance(returned, tuple) and len(returned) == 3):
        raise TypeError(
            "return (model, loader, metrics): the trained model, the training DataLoader "
            "and the dict of metrics"
        )
    model, loader, metrics = returned
    if not isinstance(metrics, dict) or "train_loss" not in metrics:
        raise TypeError("return the metrics as a dict with 'train_loss', as train_single does")
    sampler = getattr(loader, "sampler", None)
    if sampler is None:
        raise TypeError("the second value returned must be the training DataLoader")
    epoch_seen = getattr(sampler, "epoch", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(0)
    return {
        "start": start,
        "built": observer.built,
        "first": observer.first,
        "lrs": observer.lrs,
        "losses": observer.losses,
        "digest": torch_model.weights_digest(model),
        "train_loss": float(metrics["train_loss"]),
        "sampler": type(sampler).__name__,
        "sampler_epoch": epoch_seen,
        "indices": [int(i) for i in sampler],
        "n_train": len(loader.dataset),
        "threads": torch.get_num_threads(),
    }


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
                buf = (
                    args[0]
                    if args
                    else next(
                        (kwargs[k] for k in ("sendbuf", "sendobj", "obj") if k in kwargs), None
                    )
                )
                self.calls.append((name, _nbytes(buf)))
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
    tf, hvd = _keras_hvd()
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
    return {"weights": seen, "distributed": _is_distributed(optimizer)}
