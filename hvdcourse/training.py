"""Training helpers shared by the single-worker and the Horovod trainers (lesson: Hands-on conversion).

Kept free of Horovod so the two trainers differ only in their ``# Horovod:`` lines.
"""
from __future__ import annotations

import json
import os
import sys


def set_threads(threads: int, processes_on_node: int = 1) -> int:
    """Give TensorFlow ``threads`` intra-op threads (0: share this node's cores among its processes).

    Two ranks on a 2-core machine each wanting all cores would fight for them; one thread per
    rank is what makes multi-rank runs on a laptop efficient.
    """
    import tensorflow as tf

    if threads <= 0:
        threads = max(1, (os.cpu_count() or 1) // max(1, processes_on_node))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))
    return threads


def train_dataset(x, y, batch_size: int, seed: int):
    """Shuffled, batched, repeated tf.data pipeline over (x, y)."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size, drop_remainder=True).repeat().prefetch(2)


def steps_per_epoch(num_examples: int, batch_size: int, workers: int = 1, max_steps: int | None = None) -> int:
    """Steps that make one pass over the data with ``workers`` x ``batch_size`` images per step.

    Every rank must run the same number of steps (each step is an allreduce): computing it from
    the global size, not from a rank's own shard, guarantees that.
    """
    steps = max(1, num_examples // (workers * batch_size))
    return min(steps, max_steps) if max_steps else steps


def evaluate(model, x, y, batch_size: int = 256, reduce_sum=None) -> dict:
    """Loss and accuracy of ``model`` on (x, y); ``reduce_sum`` adds up the partial sums of all ranks.

    Each rank evaluates its own part; summing (loss total, correct, count) across ranks gives the
    exact metrics on the whole set, whatever the part sizes.
    """
    import numpy as np
    import tensorflow as tf

    from hvdcourse.model import loss_fn

    logits = model.predict(x, batch_size=batch_size, verbose=0)
    loss_total = float(loss_fn()(y, logits).numpy()) * len(y)
    correct = float(np.sum(np.argmax(logits, axis=1) == y))
    sums = tf.constant([loss_total, correct, float(len(y))], dtype=tf.float64)
    if reduce_sum is not None:
        sums = reduce_sum(sums)
    loss_total, correct, count = (float(v) for v in sums.numpy())
    return {"loss": loss_total / count, "accuracy": correct / count, "examples": int(count)}


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be restored; the message says what to do."""


class EpochCheckpoint:
    """Saves weights, optimizer state and the epoch number after every epoch; restores the latest.

    Built on ``tf.train.CheckpointManager`` (writes are atomic: the index file is updated last).
    Each save and restore prints one line with the epoch, the optimizer's step count and a digest
    of the weights, so a resumed run can be checked against what was saved.
    """

    def __init__(self, directory: str, model, optimizer, keep: int = 2):
        import tensorflow as tf

        self.directory = directory
        self.model = model
        self.optimizer = optimizer
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self.epoch)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=keep)

    def describe(self) -> str:
        """``epoch=E optimizer_iterations=I weights_sha256=D`` of the state in memory."""
        from hvdcourse.model import weights_digest

        return (f"epoch={int(self.epoch.numpy())} optimizer_iterations={int(self.optimizer.iterations.numpy())} "
                f"weights_sha256={weights_digest(self.model)}")

    def restore(self) -> int:
        """Restore the latest checkpoint if any; return the number of epochs already done.

        Raises :class:`CheckpointError` (a ``RuntimeError``) when the files are corrupt or incompatible.
        """
        latest = self.manager.latest_checkpoint
        if latest is None:
            return 0
        try:
            self.checkpoint.restore(latest).expect_partial()
        except Exception as err:  # corrupt or incompatible files: say which and how to recover
            raise CheckpointError(f"cannot restore checkpoint {latest!r} ({type(err).__name__}: "
                                  f"{str(err).splitlines()[0] if str(err) else ''}). Delete {self.directory!r} "
                                  "or pass --no-resume to start again.") from None
        print(f"[checkpoint] restored {self.describe()} from {latest}", flush=True)
        return int(self.epoch.numpy())

    def restore_or_error(self):
        """Like :meth:`restore`, but return the :class:`CheckpointError` instead of raising it.

        Rank 0 broadcasts the result, so every rank learns that the run must stop (none is left
        waiting in a collective for a rank that has exited).
        """
        try:
            return self.restore()
        except CheckpointError as err:
            return err

    def callback(self):
        """A Keras callback that saves at the end of every epoch."""
        import tensorflow as tf

        outer = self

        class _Save(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                outer.epoch.assign(epoch + 1)
                path = outer.manager.save(checkpoint_number=epoch + 1)
                print(f"[checkpoint] saved {outer.describe()} to {path}", flush=True)

        return _Save()


def exit_if_error(value, show: bool = True):
    """Return ``value``; if it is an exception (see :meth:`EpochCheckpoint.restore_or_error`), exit.

    Prints ``error: <message>`` (when ``show``) and exits with status 2: a clean stop, no traceback.
    """
    if isinstance(value, BaseException):
        if show:
            print(f"error: {value}", file=sys.stderr, flush=True)
        sys.exit(2)
    return value


def ensure_writable_dir(path: str) -> None:
    """Create ``path`` or exit with a clear message if it cannot be written."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".write-test")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        sys.exit(f"error: checkpoint folder {path!r} is not writable ({err.strerror}). "
                 "Pass --checkpoint-dir with a folder you can write to.")


def write_metrics(path: str | None, metrics: dict) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(metrics, fh, indent=2)
