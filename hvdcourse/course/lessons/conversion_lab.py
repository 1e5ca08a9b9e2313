"""Learning-rate scaling and warm-up, metric averaging, and how much of the data set each rank holds in
memory, measured (lesson: Converting a Keras MNIST script to Horovod).

Run under Horovod (rank 0 writes one JSON file)::

    horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.course.lessons.conversion_lab --out lab.json
    python -m hvdcourse.course.lessons.conversion_lab --out ref.json          # 1 worker: the reference

Every configuration trains the course's model from the same initial weights (per seed) in the same
process, so the only difference between them is the learning-rate schedule.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tracemalloc

CONFIGS = ("unscaled", "scaled", "scaled+warmup", "sqrt-scaled")


def scaled_lr(config: str, base_lr: float, workers: int) -> float:
    """The learning rate of a configuration on ``workers`` workers, from the single-worker ``base_lr``.

    "unscaled": base_lr; "scaled" and "scaled+warmup": base_lr * N (the linear rule of Goyal et al.
    2017, made for SGD); "sqrt-scaled": base_lr * sqrt(N) (the square-root rule of Malladi et al.
    2022 for adaptive optimizers such as Adam, whose steps do not grow with the gradient's size:
    the course's rule, :func:`hvdcourse.examples.training.scaled_lr`).
    """
    if config not in CONFIGS:
        raise ValueError(f"unknown configuration {config!r}; choose one of {', '.join(CONFIGS)}")
    from hvdcourse.examples.training import lr_multiplier

    rule = {"unscaled": "none", "sqrt-scaled": "sqrt"}.get(config, "linear")
    return base_lr * lr_multiplier(rule, workers)


# ------------------------------------------------------------------------------------- memory


def held_bytes(load) -> tuple:
    """Run ``load()`` and return (bytes of numpy array data it leaves allocated, its result).

    numpy reports the data buffers of its arrays to ``tracemalloc`` (in its own domain); what is
    still allocated there after ``load`` returns is what the rank keeps (temporaries are freed
    and not counted, nor are Python objects such as imported modules).
    """
    import numpy as np

    only_numpy = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(only_numpy)
        result = load()
        after = tracemalloc.take_snapshot().filter_traces(only_numpy)
        grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        return grown, result
    finally:
        tracemalloc.stop()


def block(n: int, rank: int, size: int) -> slice:
    """Rank ``rank``'s contiguous block of ``n`` items: block sizes differ by at most one, none is lost."""
    return slice(rank * n // size, (rank + 1) * n // size)


def memory_study(rank: int, size: int, workdir: str, barrier) -> list:
    """Bytes of training images each loading strategy leaves on this rank.

    ``barrier()`` synchronises the ranks (rank 0 writes the files the other strategies read).
    """
    import numpy as np

    from hvdcourse.examples import data

    def as_trainer_does():  # train_hvd.py: every rank loads everything, then keeps its slice
        ds = data.load_mnist(quiet=True)
        x, y = data.to_model_inputs(ds.x_train, ds.y_train)
        return ds, data.shard(x, rank, size), data.shard(y, rank, size)

    full_bytes, (ds, x_shard, _) = held_bytes(as_trainer_does)
    images = os.path.join(workdir, "x_train.npy")
    if rank == 0:  # a preprocessing step done once: one array file and one file per rank
        np.save(images, ds.x_train)
        for r in range(size):
            np.save(
                os.path.join(workdir, f"x_train.part{r}.npy"),
                ds.x_train[block(len(ds.x_train), r, size)],
            )
    barrier()
    own_file_bytes, _ = held_bytes(
        lambda: np.load(os.path.join(workdir, f"x_train.part{rank}.npy"))
    )
    mmap_bytes, _ = held_bytes(
        lambda: np.array(np.load(images, mmap_mode="r")[block(len(ds.x_train), rank, size)])
    )
    one_copy = ds.x_train.nbytes
    return [
        {
            "rank": rank,
            "strategy": "load all, then shard (train_hvd)",
            "bytes": full_bytes,
            "shard_images": len(x_shard),
        },
        {
            "rank": rank,
            "strategy": "own file per rank (uint8)",
            "bytes": own_file_bytes,
            "shard_images": len(x_shard),
        },
        {
            "rank": rank,
            "strategy": "memory-mapped file, own block (uint8)",
            "bytes": mmap_bytes,
            "shard_images": len(x_shard),
        },
        {
            "rank": rank,
            "strategy": "(one uint8 copy of all training images)",
            "bytes": one_copy,
            "shard_images": len(ds.x_train),
        },
    ]


# ------------------------------------------------------------------------------ learning rate


def training_images(dataset, limit: int | None = None):
    """The first ``limit`` training images and labels as model inputs (all of them if ``limit`` is None).

    The offline MNIST is stored shuffled and stratified, so its first images hold every digit about
    equally; the lesson trains its many runs on part of it to keep the page's execution short.
    """
    from hvdcourse.examples import data

    if limit is not None and not 0 < limit <= len(dataset.x_train):
        raise ValueError(
            f"--train-images must be between 1 and {len(dataset.x_train)}, not {limit}"
        )
    end = len(dataset.x_train) if limit is None else limit
    return data.to_model_inputs(dataset.x_train[:end], dataset.y_train[:end])


def lr_study(
    hvd,
    tf,
    configs,
    seeds,
    epochs: int,
    batch_size: int,
    base_lr: float,
    warmup_epochs: float,
    max_steps: int | None = None,
    train_images: int | None = None,
) -> list:
    """Train once per (config, seed); return one record per epoch (rank 0's view, full-test metrics).

    Each record holds the validation accuracy of every rank on its own shard (before
    ``MetricAverageCallback``), the value Keras logs after it, and the exact accuracy on the
    whole test set (sums over ranks).
    """
    import horovod.tensorflow as hvd_tf  # allgather_object is not re-exported by the Keras module

    from hvdcourse.examples import data, model as course_model, training

    dataset = data.load_mnist(quiet=True)
    x_train, y_train = training_images(dataset, train_images)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    steps = training.steps_per_epoch(len(x_train), batch_size, hvd.size(), max_steps)
    x_train, y_train = (
        data.shard(x_train, hvd.rank(), hvd.size()),
        data.shard(y_train, hvd.rank(), hvd.size()),
    )
    x_test, y_test = (
        data.shard(x_test, hvd.rank(), hvd.size()),
        data.shard(y_test, hvd.rank(), hvd.size()),
    )
    records = []

    class Probe(tf.keras.callbacks.Callback):
        """Copies the epoch's logs (placed before and after MetricAverageCallback)."""

        def __init__(self):
            super().__init__()
            self.logs = []

        def on_epoch_end(self, epoch, logs=None):
            self.logs.append(dict(logs or {}))

    class LrTrace(tf.keras.callbacks.Callback):
        """The learning rate in the optimizer at every training step."""

        def __init__(self):
            super().__init__()
            self.values = []

        def on_train_batch_begin(self, batch, logs=None):
            self.values.append(float(self.model.optimizer.learning_rate))

    # One model and optimizer for all runs (compiled once: no re-tracing); each run starts from the
    # initial weights of its seed, with the optimizer's state (step count, moments) set back to zero.
    model = course_model.build_model()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=base_lr))
    model.compile(optimizer=optimizer, loss=course_model.loss_fn(), metrics=["accuracy"])
    for seed in seeds:
        tf.keras.utils.set_random_seed(seed)
        initial = course_model.build_model().get_weights()  # same initial weights for every config
        for config in configs:
            model.set_weights(initial)
            for variable in optimizer.variables:
                variable.assign(tf.zeros_like(variable))
            lr = scaled_lr(config, base_lr, hvd.size())
            optimizer.learning_rate.assign(lr)
            before, after, lr_trace = Probe(), Probe(), LrTrace()
            full = []
            callbacks = [
                hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                before,
                hvd.callbacks.MetricAverageCallback(),
                after,
                lr_trace,
                tf.keras.callbacks.LambdaCallback(
                    on_epoch_end=lambda e, logs: full.append(
                        (
                            training.evaluate(
                                model,
                                x_test,
                                y_test,
                                reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum),
                            ),
                            float(model.optimizer.learning_rate),
                        )
                    )
                ),
            ]
            if config == "scaled+warmup":
                callbacks.insert(
                    1,
                    hvd.callbacks.LearningRateWarmupCallback(
                        initial_lr=lr, warmup_epochs=warmup_epochs, steps_per_epoch=steps
                    ),
                )
            start = time.perf_counter()
            model.fit(
                training.train_dataset(x_train, y_train, batch_size, seed + hvd.rank()),
                steps_per_epoch=steps,
                epochs=epochs,
                validation_data=(x_test, y_test),
                callbacks=callbacks,
                verbose=0,
            )
            seconds = time.perf_counter() - start
            own = hvd_tf.allgather_object([log["val_accuracy"] for log in before.logs])
            for epoch in range(epochs):
                metrics, lr_now = full[epoch]
                records.append(
                    {
                        "config": config,
                        "seed": seed,
                        "epoch": epoch + 1,
                        "workers": hvd.size(),
                        "lr_end_of_epoch": lr_now,
                        "steps_per_epoch": steps,
                        "fit_seconds": seconds,
                        "lr_per_step": lr_trace.values[epoch * steps : (epoch + 1) * steps],
                        "val_accuracy_own_shard": [float(r[epoch]) for r in own],
                        "val_accuracy_logged": float(after.logs[epoch]["val_accuracy"]),
                        "test_accuracy": metrics["accuracy"],
                        "test_loss": metrics["loss"],
                    }
                )
    return records


def metric_views(
    hvd,
    tf,
    batch_size: int,
    max_steps: int | None = None,
    seed: int = 1,
    train_images: int | None = None,
) -> dict:
    """One epoch of ``model.fit`` on every rank, showing what each view of the metrics holds.

    Returns (on every rank) the epoch-end logs of every rank before ``MetricAverageCallback``
    (``own``, one dict per rank: each rank's running means over its own batches, and its validation
    on its own shard of the test set), the logs after it (``averaged``), and the line Keras printed on
    rank 0 with ``verbose=2`` (``printed``). ``last_batch`` holds rank 0's logs at its last batch:
    what a ``verbose=1`` progress bar shows during the epoch.
    """
    import contextlib
    import io

    import horovod.tensorflow as hvd_tf

    from hvdcourse.examples import data, model as course_model, training

    dataset = data.load_mnist(quiet=True)
    x_train, y_train = training_images(dataset, train_images)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)

    def shard(a):
        return data.shard(a, hvd.rank(), hvd.size())

    steps = training.steps_per_epoch(len(x_train), batch_size, hvd.size(), max_steps)
    tf.keras.utils.set_random_seed(seed)
    model = course_model.build_model()
    model.compile(
        optimizer=hvd.DistributedOptimizer(
            tf.keras.optimizers.Adam(training.scaled_lr(1e-3, hvd.size(), "adam"))
        ),
        loss=course_model.loss_fn(),
        metrics=["accuracy"],
    )
    seen = {"own": {}, "averaged": {}, "last_batch": {}}

    class Copy(tf.keras.callbacks.Callback):
        def __init__(self, key):
            super().__init__()
            self.key = key

        def on_epoch_end(self, epoch, logs=None):
            seen[self.key] = {k: float(v) for k, v in (logs or {}).items()}

        def on_train_batch_end(self, batch, logs=None):
            if self.key == "own":
                seen["last_batch"] = {k: float(v) for k, v in (logs or {}).items()}

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.fit(
            training.train_dataset(shard(x_train), shard(y_train), batch_size, seed + hvd.rank()),
            steps_per_epoch=steps,
            epochs=1,
            validation_data=(shard(x_test), shard(y_test)),
            callbacks=[
                hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                Copy("own"),
                hvd.callbacks.MetricAverageCallback(),
                Copy("averaged"),
            ],
            verbose=2 if hvd.rank() == 0 else 0,
        )
    lines = [line for line in printed.getvalue().splitlines() if " - loss: " in line]
    return {
        "own": hvd_tf.allgather_object(seen["own"]),
        "averaged": seen["averaged"],
        "last_batch": hvd_tf.broadcast_object(seen["last_batch"], root_rank=0),
        "printed": hvd_tf.broadcast_object(lines[-1] if lines else "", root_rank=0),
    }


def printed_metrics(line: str) -> dict:
    """{name: value} of a Keras epoch line such as ``6/6 - 1s - 96ms/step - loss: 2.1 - accuracy: 0.3``."""
    import re

    return {name: float(value) for name, value in re.findall(r"(\w+): ([-+\d.eE]+)(?=\s|$)", line)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Measurements of the lesson Converting a Keras MNIST script to Horovod."
    )
    parser.add_argument("--out", required=True, help="JSON file written by rank 0")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="batch size of one rank")
    parser.add_argument("--lr", type=float, default=1e-3, help="single-worker learning rate")
    parser.add_argument("--warmup-epochs", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument(
        "--train-images",
        type=int,
        default=None,
        help="train on the first N training images (default: all)",
    )
    parser.add_argument(
        "--no-memory", dest="memory", action="store_false", help="skip the memory study"
    )
    parser.add_argument(
        "--metric-views",
        action="store_true",
        help="also record one epoch's metrics as each rank, MetricAverageCallback and Keras' line see them",
    )
    parser.add_argument(
        "--batch-norm-batches",
        type=int,
        nargs="*",
        default=[],
        help="also record batch-normalisation statistics for these per-rank batch sizes",
    )
    args = parser.parse_args(argv)
    if args.train_images is not None and args.train_images < 1:
        parser.error(f"--train-images must be at least 1, not {args.train_images}")

    import tensorflow as tf
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd

    from hvdcourse.examples import training

    hvd.init()
    training.set_threads(0, hvd.local_size())
    workdir = os.path.dirname(os.path.abspath(args.out))
    result = {"workers": hvd.size(), "settings": vars(args)}
    if args.memory:
        memory = memory_study(
            hvd.rank(), hvd.size(), workdir, barrier=lambda: hvd.allreduce(tf.constant(0))
        )
        result["memory"] = sum(hvd_tf.allgather_object(memory), [])
    if args.metric_views:
        result["metric_views"] = metric_views(
            hvd, tf, args.batch_size, args.max_steps, train_images=args.train_images
        )
    if args.batch_norm_batches:
        from hvdcourse.examples import data
        from hvdcourse.course.lessons import gradients

        images = data.shard(data.load_mnist(quiet=True).x_train, hvd.rank(), hvd.size())
        result["batch_norm"] = sum(
            hvd_tf.allgather_object(
                [
                    gradients.batch_norm_views(gradients.quadrant_features(images[:b]))
                    for b in args.batch_norm_batches
                ]
            ),
            [],
        )
    start = time.perf_counter()
    result["epochs"] = lr_study(
        hvd,
        tf,
        args.configs,
        args.seeds,
        args.epochs,
        args.batch_size,
        args.lr,
        args.warmup_epochs,
        args.max_steps,
        args.train_images,
    )
    result["seconds"] = time.perf_counter() - start
    if hvd.rank() == 0:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
        print(
            f"[conversion_lab] {hvd.size()} worker(s): wrote {args.out} in {result['seconds']:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
