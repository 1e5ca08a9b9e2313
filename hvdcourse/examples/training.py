"""Training helpers shared by the single-worker and the Horovod trainers (lesson: Converting a Keras MNIST script to Horovod).

Kept free of Horovod so the two trainers differ only in their distributed lines (each under a
``# Horovod:`` comment): where a helper needs a collective (:func:`resume_from_checkpoint`), the
trainer passes Horovod's function in.
"""

from __future__ import annotations

import json
import os
import time

from hvdcourse.runtime import results
from hvdcourse.runtime.errors import CourseError, StoppedWithRank0, UsageError
from hvdcourse.runtime.ranks import launcher_rank


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


# a run with more passes than this would repeat the orders of another seed
PASS_SEED_STRIDE = 1_000_003


def train_dataset(x, y, batch_size: int, seed: int, start_step: int = 0):
    """Shuffled, batched, endless tf.data pipeline over (x, y), starting at batch ``start_step``.

    Pass ``p`` over the data is shuffled with its own seed, made of ``seed`` and ``p``, so the batch
    at any position of the stream depends only on ``seed`` and that position. A run resumed after
    ``k`` epochs (``start_step = k * steps_per_epoch``) therefore sees the very batches that an
    uninterrupted run sees from there (lesson: Faults, hangs and elastic training).
    """
    import tensorflow as tf

    per_pass = len(x) // batch_size
    if per_pass < 1:
        raise ValueError(
            f"batch size {batch_size} is larger than the {len(x)} examples of this worker; "
            "pass a smaller --batch-size"
        )
    first_pass, skip = divmod(start_step, per_pass)
    examples = tf.data.Dataset.from_tensor_slices((x, y))

    def one_pass(p):
        order_seed = seed * PASS_SEED_STRIDE + p  # a different, reproducible order for every pass
        return examples.shuffle(len(x), seed=order_seed).batch(batch_size, drop_remainder=True)

    passes = tf.data.Dataset.counter(start=first_pass).flat_map(one_pass)
    return passes.skip(skip).prefetch(2)


def steps_per_epoch(
    num_examples: int, batch_size: int, workers: int = 1, max_steps: int | None = None
) -> int:
    """Steps that make one pass over the data with ``workers`` x ``batch_size`` images per step.

    Every rank must run the same number of steps (each step is an allreduce): computing it from
    the global size, not from a rank's own shard, guarantees that.
    """
    steps = max(1, num_examples // (workers * batch_size))
    return min(steps, max_steps) if max_steps else steps


# The course's learning-rate rule: which rule each optimizer family follows when the global batch
# grows by a factor (linear: Goyal et al. 2017, for SGD; square root: Malladi et al. 2022, for Adam).
LR_RULE_OF = {"sgd": "linear", "adam": "sqrt"}


def lr_multiplier(rule: str, factor: float) -> float:
    """How much ``rule`` ("none", "linear" or "sqrt") multiplies the rate when the batch grows by ``factor``."""
    if rule == "none":
        return 1.0
    if rule == "linear":
        return float(factor)
    if rule == "sqrt":
        return float(factor) ** 0.5
    raise UsageError(f"unknown learning-rate rule {rule!r}; use one of none, linear, sqrt")


def scaled_lr(base_lr: float, workers: int, optimizer: str = "adam") -> float:
    """The learning rate for ``workers`` workers, each with the batch ``base_lr`` was tuned for.

    The effective batch is ``workers`` times larger. SGD (with or without momentum) scales the rate
    linearly (Goyal et al. 2017); Adam and other adaptive optimizers, whose steps do not grow with
    the gradient's size, by the square root (Malladi et al. 2022). Every trainer of the course uses
    Adam, hence the default. A warm-up goes with either rule.
    """
    family = optimizer.lower()
    if family not in LR_RULE_OF:
        raise UsageError(
            f"no learning-rate rule for optimizer {optimizer!r}; use one of {', '.join(LR_RULE_OF)}"
        )
    return base_lr * lr_multiplier(LR_RULE_OF[family], workers)


def evaluate(model, x, y, batch_size: int = 256, reduce_sum=None) -> dict:
    """Loss and accuracy of ``model`` on (x, y); ``reduce_sum`` adds up the partial sums of all ranks.

    Each rank evaluates its own part; summing (loss total, correct, count) across ranks gives the
    exact metrics on the whole set, whatever the part sizes.
    """
    import numpy as np
    import tensorflow as tf

    from hvdcourse.examples.model import loss_fn

    logits = model.predict(x, batch_size=batch_size, verbose=0)
    loss_total = float(loss_fn()(y, logits).numpy()) * len(y)
    correct = float(np.sum(np.argmax(logits, axis=1) == y))
    sums = tf.constant([loss_total, correct, float(len(y))], dtype=tf.float64)
    if reduce_sum is not None:
        sums = reduce_sum(sums)
    loss_total, correct, count = (float(v) for v in sums.numpy())
    return {"loss": loss_total / count, "accuracy": correct / count, "examples": int(count)}


class CheckpointError(CourseError, RuntimeError):
    """A checkpoint exists but cannot be restored; the message says what to do (exit code 2)."""


class EpochCheckpoint:
    """Saves weights, optimizer state and the epoch number after every epoch; restores the latest.

    Built on ``tf.train.CheckpointManager`` (writes are atomic: the index file is updated last).
    Each save and restore prints one line with the epoch, the optimizer's step count and digests
    of the weights and of the optimizer's state, so a resumed run can be checked against what was saved;
    the same values go to the launcher as a record (:func:`report`, kind ``saved`` or ``restored``).
    Build the optimizer's state first (``optimizer.build(model.trainable_variables)``): then
    :attr:`variables` is the whole training state, what a distributed trainer broadcasts from rank 0.
    """

    def __init__(self, directory: str, model, optimizer, keep: int = 2):
        import tensorflow as tf

        self.directory = directory
        self.model = model
        self.optimizer = optimizer
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=self.epoch)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=keep)

    @property
    def variables(self) -> list:
        """The model's weights and the optimizer's variables (step count, learning rate, moments)."""
        return [*self.model.variables, *optimizer_variables(self.optimizer)]

    def state(self) -> dict:
        """``epoch``, ``optimizer_iterations``, ``weights_sha256`` and ``optimizer_sha256`` in memory.

        ``optimizer_sha256`` digests the optimizer's own variables (step count, moments), as Keras
        lists them.
        """
        return {"epoch": int(self.epoch.numpy()), **training_state(self.model, self.optimizer)}

    def describe(self) -> str:
        """``epoch=E optimizer_iterations=I weights_sha256=W optimizer_sha256=O`` (:meth:`state`)."""
        return " ".join(f"{key}={value}" for key, value in self.state().items())

    def save(self, epochs_done: int) -> str:
        """Save the state after ``epochs_done`` epochs; print, report and return the checkpoint's path."""
        self.epoch.assign(epochs_done)
        path = self.manager.save(checkpoint_number=epochs_done)
        print(f"[checkpoint] saved {self.describe()} to {path}", flush=True)
        report("saved", {**self.state(), "path": path})
        return path

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
            raise CheckpointError(
                f"cannot restore checkpoint {latest!r} ({type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}). Delete {self.directory!r} "
                "or pass --no-resume to start again."
            ) from None
        print(f"[checkpoint] restored {self.describe()} from {latest}", flush=True)
        report("restored", {**self.state(), "path": latest})
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
                outer.save(epoch + 1)

        return _Save()


def optimizer_variables(optimizer) -> list:
    """The optimizer's variables, its learning rate included when that is a variable of its own.

    The learning rate is restored with the rest: after a warm-up it is whatever the warm-up left.
    """
    variables = list(
        optimizer.variables() if callable(optimizer.variables) else optimizer.variables
    )
    rate = getattr(optimizer, "_learning_rate", None)
    if hasattr(rate, "assign") and not any(rate is v for v in variables):
        variables.append(rate)
    return variables


def resume_from_checkpoint(
    checkpoint: EpochCheckpoint,
    resume: bool = True,
    rank: int = 0,
    broadcast_object=None,
    broadcast_variables=None,
) -> int:
    """Resume every worker from the latest checkpoint; return the number of epochs already done.

    With ``resume=False`` (``--no-resume``) every worker starts from epoch 0. The one restore of the course's trainers (lesson: Faults, hangs and elastic training):

    1. rank 0 makes sure it can write the checkpoint folder and reads the latest checkpoint (if
       ``resume``): epoch, weights, optimizer state;
    2. ``broadcast_object`` (Horovod's) sends the epoch to every rank, or the error (a folder it
       cannot write, files it could not read): then every rank raises, rank 0 with
       the message, the others quietly (:class:`~hvdcourse.runtime.errors.StoppedWithRank0`), and no
       rank is left waiting in a collective for one that has exited;
    3. ``broadcast_variables`` (Horovod's) sends rank 0's weights and optimizer state
       (:attr:`EpochCheckpoint.variables`) to every rank **before the first step**: a broadcast after
       the first batch (Keras' ``BroadcastGlobalVariablesCallback``) would come too late for a resumed run.

    Build the optimizer's state first (``optimizer.build(model.trainable_variables)``) so that it is
    restored and sent too. Without the two functions (one worker, or workers that each read the
    same files, as MultiWorkerMirroredStrategy's do), each caller restores on its own.
    """
    outcome = _first_state(checkpoint, resume) if rank == 0 or broadcast_object is None else 0
    if broadcast_object is not None:
        outcome = broadcast_object(outcome, root_rank=0)
    if isinstance(outcome, CourseError):
        raise outcome if rank == 0 else StoppedWithRank0(outcome)
    if broadcast_variables is not None:
        broadcast_variables(checkpoint.variables, root_rank=0)
    return int(outcome)


def _first_state(checkpoint: EpochCheckpoint, resume: bool):
    """The epoch to start from, or the :class:`CourseError` to stop every rank with."""
    try:
        ensure_writable_dir(checkpoint.directory)
    except CourseError as err:
        return err
    return checkpoint.restore_or_error() if resume else 0


def training_state(model, optimizer) -> dict:
    """``optimizer_iterations``, ``weights_sha256`` and ``optimizer_sha256`` of a model in training."""
    from hvdcourse.examples.model import variables_digest, weights_digest

    return {
        "optimizer_iterations": int(optimizer.iterations.numpy()),
        "weights_sha256": weights_digest(model),
        "optimizer_sha256": variables_digest(optimizer.variables),
    }


def report(kind: str, record: dict) -> None:
    """Send ``{"kind": kind, "rank": this rank, **record}`` to the process that launched the run.

    :func:`hvdcourse.runtime.launch.run_ranks` returns it in ``RankRun.results``, so no caller reads
    values out of the printed lines; a script started by hand sends nothing.
    """
    results.report({"kind": kind, "rank": launcher_rank(), **record})


def report_final_metrics(evaluated: dict, workers: int, model, **extra) -> dict:
    """Report this worker's final metrics to the launcher (:func:`report`, kind ``final``) and return them.

    The record: ``loss``, ``accuracy``, ``examples`` (from :func:`evaluate`), ``workers``,
    ``weights_sha256``, then ``extra`` (e.g. ``epochs``). Every trainer makes it once, at the end,
    on every worker (most through :func:`finish`); rank 0 writes it with ``--metrics-json``.
    """
    from hvdcourse.examples.model import weights_digest

    record = {
        **evaluated,
        "workers": int(workers),
        "weights_sha256": weights_digest(model),
        **extra,
    }
    report("final", record)
    return record


def finish(
    script: str, evaluated: dict, model, metrics_json=None, workers: int = 1, rank=None, **extra
) -> int:
    """The end of a Keras trainer: report, print and write its final metrics; return 0, its exit status.

    The record is :func:`report_final_metrics`'s (``extra``: e.g. ``lr``); one line
    ``[script] rank=R test_loss=L test_accuracy=A weights_sha256=W`` on every worker (no ``rank=``
    where ``rank`` is None: one worker); rank 0, or the only worker, writes the record to ``metrics_json``.
    """
    return print_and_write(
        script, report_final_metrics(evaluated, workers, model, **extra), metrics_json, rank
    )


def print_and_write(script: str, record: dict, metrics_json=None, rank=None) -> int:
    """:func:`finish` once the record is made (the PyTorch trainers' digest differs); returns 0."""
    who = "" if rank is None else f"rank={rank} "
    print(
        f"[{script}] {who}test_loss={record['loss']:.4f} test_accuracy={record['accuracy']:.4f} "
        f"weights_sha256={record['weights_sha256']}",
        flush=True,
    )
    if not rank:
        write_metrics(metrics_json, record)
    return 0


class EpochTimer:
    """Wall time and images of the training loop, for images/s (the first epoch, with its warm-up
    of allocators and collectives, is counted separately)."""

    def __init__(self):
        self.epochs = []  # (seconds, images) per epoch

    def measure(self, images: int):
        timer, start = self, time.perf_counter()

        class _Epoch:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                timer.epochs.append((time.perf_counter() - start, images))

        return _Epoch()

    def summary(self) -> dict:
        """``train_seconds`` (all epochs) and ``images_per_second`` (epochs after the first, if any)."""
        later = self.epochs[1:] or self.epochs
        seconds = sum(s for s, _ in later)
        return {
            "train_seconds": round(sum(s for s, _ in self.epochs), 3),
            "images_per_second": round(sum(n for _, n in later) / seconds, 1) if seconds else None,
        }


def keras_epoch_timer(images_per_step: int, report_kind: str | None = None):
    """A Keras callback timing each epoch's training batches (epoch begins to last batch ends).

    Its ``timer`` (:class:`EpochTimer`) gives ``train_seconds``
    and ``images_per_second`` (epochs after the first), measured as the PyTorch trainers measure
    theirs; with ``report_kind`` it also reports them at the end of training (lessons: PyTorch with
    Horovod, and DDP; Horovod and Ray Train, side by side).
    """
    import tensorflow as tf

    class KerasEpochTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.timer, self.start, self.end, self.batches = EpochTimer(), None, None, 0

        def on_epoch_begin(self, epoch, logs=None):
            self.start, self.end, self.batches = time.perf_counter(), None, 0

        def on_train_batch_end(self, batch, logs=None):
            self.end, self.batches = time.perf_counter(), self.batches + 1

        def on_epoch_end(self, epoch, logs=None):
            if self.end is not None:
                self.timer.epochs.append((self.end - self.start, self.batches * images_per_step))

        def on_train_end(self, logs=None):
            if report_kind:
                report(report_kind, self.timer.summary())

    return KerasEpochTimer()


def ensure_writable_dir(path: str) -> None:
    """Create ``path``; raise :class:`~hvdcourse.runtime.errors.UsageError` if it cannot be written."""
    try:
        os.makedirs(path, exist_ok=True)
        # one probe per process: workers that share the folder (MWMS) check it at the same moment
        probe = os.path.join(path, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as err:
        raise UsageError(
            f"checkpoint folder {path!r} is not writable ({err.strerror}). "
            "Pass --checkpoint-dir with a folder you can write to."
        ) from None


def write_metrics(path: str | None, metrics: dict) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(metrics, fh, indent=2)
