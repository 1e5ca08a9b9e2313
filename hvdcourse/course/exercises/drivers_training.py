"""The rank side of exercises 5-7: a Keras training run observed from outside the learner's code.

Trusted code: :mod:`hvdcourse.course.exercises.harness` calls it as ``driver(fn, rank, size, **args)``
inside the rank's own folder (by its name in :mod:`hvdcourse.course.exercises.drivers`); it returns
JSON-able data that the checks of :mod:`hvdcourse.course.exercises.checks_training` judge.
"""

from __future__ import annotations

import hashlib

import numpy as np


# ---------------------------------------------------------------- Keras + Horovod helpers
def keras_hvd(threads: int = 1, eager: bool = False):
    """TensorFlow and Horovod's Keras API, initialised, on ``threads`` threads (``eager``: no graphs)."""
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


def is_distributed(optimizer) -> bool:
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
        "distributed": is_distributed(model.optimizer),
        "examples": fingerprints(x_train),
    }
    if rank == 0:
        full = data.load_mnist(quiet=True)
        result["all_examples"] = fingerprints(data.to_model_inputs(full.x_train, full.y_train)[0])
    return result


def warmup(fn, rank, size, base_lr=0.01, warmup_epochs=2, steps_per_epoch=4, epochs=3):
    """``fn(hvd, base_lr, warmup_epochs, steps_per_epoch) -> (optimizer, callbacks)`` on a toy model."""
    tf, hvd = keras_hvd(eager=True)
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
        "distributed": is_distributed(model.optimizer),
        "steps_per_epoch": steps_per_epoch,
        "optimizer": type(model.optimizer).__name__,
    }


def callbacks(fn, rank, size, checkpoint_dir="checkpoints", epochs=2):
    """``fn(hvd, checkpoint_dir) -> callbacks``; metrics seen before and after them are recorded."""
    tf, hvd = keras_hvd(eager=True)
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
