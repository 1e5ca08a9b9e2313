"""Why data parallelism is exact: averaged shard gradients = the full-batch gradient
(lesson: Parallelism schemes).

With the loss defined as the MEAN over a batch, the gradient of N equal shards of B samples each,
averaged over the N workers, is the gradient of the whole batch of N*B samples:

    (1/N) sum_k (1/B) sum_{i in shard k} grad l(w, x_i)  =  (1/(N B)) sum_i grad l(w, x_i).

With unequal shards (B_k samples on worker k) the plain average is WRONG; the average weighted by
B_k / sum(B) is right. Horovod's ``DistributedOptimizer`` takes the plain average, which is why every
worker should run the same number of equal-size batches per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def loss_gradients(model, x, y) -> list:
    """Gradients (numpy arrays, one per trainable variable) of the mean loss of ``model`` on (x, y)."""
    import tensorflow as tf

    from hvdcourse.examples.model import loss_fn

    with tf.GradientTape() as tape:
        loss = loss_fn()(y, model(x, training=False))  # the mean over the samples
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def split_sizes(total: int, workers: int) -> list:
    """Equal shard sizes for ``workers`` workers; raises if ``total`` is not divisible (as in the equation)."""
    if workers < 1 or total % workers:
        raise ValueError(
            f"{total} samples do not split into {workers} equal shards; "
            "pass explicit sizes for unequal shards"
        )
    return [total // workers] * workers


def shard_gradients(model, x, y, sizes: Sequence) -> list:
    """Per-worker gradients: worker k gets the next ``sizes[k]`` consecutive samples (as in the equation)."""
    if sum(sizes) != len(x):
        raise ValueError(f"shard sizes add up to {sum(sizes)}, but there are {len(x)} samples")
    bounds = np.cumsum([0, *sizes])
    return [loss_gradients(model, x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def average(per_worker: list, weights: Sequence | None = None) -> list:
    """Average of per-worker gradient lists (what allreduce-average computes), optionally weighted."""
    n = len(per_worker)
    w = (
        np.full(n, 1.0 / n)
        if weights is None
        else np.asarray(weights, dtype=float) / np.sum(weights)
    )
    return [
        sum(wk * grads[i] for wk, grads in zip(w, per_worker)) for i in range(len(per_worker[0]))
    ]


def max_relative_difference(a: list, b: list) -> float:
    """max |a - b| over all gradient entries, relative to the largest |b| entry."""
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))
    scale = max(float(np.max(np.abs(y))) for y in b)
    return diff / scale if scale else diff


@dataclass
class GradientCheck:
    """Outcome of :func:`check_data_parallel_gradient`."""

    sizes: list
    weighted: bool
    relative_difference: float
    tolerance: float

    @property
    def match(self) -> bool:
        return self.relative_difference <= self.tolerance


def check_data_parallel_gradient(
    model,
    x,
    y,
    workers: int = 2,
    sizes: Sequence | None = None,
    weighted: bool = False,
    tolerance: float = 1e-5,
) -> GradientCheck:
    """Compare the full-batch gradient with the average of the workers' shard gradients.

    ``sizes`` (default: equal shards) sets how many samples each worker gets; ``weighted`` weights
    each worker's gradient by its share of the samples. float32 arithmetic: agreement means a
    relative difference around 1e-7, far below ``tolerance``.
    """
    sizes = list(sizes) if sizes is not None else split_sizes(len(x), workers)
    full = loss_gradients(model, x, y)
    averaged = average(shard_gradients(model, x, y, sizes), weights=sizes if weighted else None)
    return GradientCheck(sizes, weighted, max_relative_difference(averaged, full), tolerance)


# ----------------------------------------------------------------------- batch normalisation


def quadrant_features(images) -> np.ndarray:
    """Mean grey value of each quarter of every 28x28 image: a (batch, 4) float32 array (4 "channels")."""
    x = np.asarray(images, dtype=np.float32).reshape(len(images), 28, 28)
    return (
        np.stack(
            [
                x[:, :14, :14].mean((1, 2)),
                x[:, :14, 14:].mean((1, 2)),
                x[:, 14:, :14].mean((1, 2)),
                x[:, 14:, 14:].mean((1, 2)),
            ],
            axis=1,
        )
        / 255.0
    )


def batch_norm_views(features) -> dict:
    """What batch normalisation sees on this rank for one training step on ``features`` (batch, channels).

    Call it on every rank of a Horovod job (it allgathers). Returns per-channel lists: the rank's own
    batch mean and (biased) variance, the mean and variance over the batches of all ranks, and the
    moving statistics that a ``tf.keras.layers.BatchNormalization`` and a ``hvd.SyncBatchNormalization``
    layer hold after one training call (momentum 0, so the moving statistics ARE the batch
    statistics the layer normalised with). Lesson: Parallelism schemes.
    """
    import horovod.tensorflow as hvd
    import tensorflow as tf

    x = tf.constant(np.asarray(features, dtype=np.float32))
    plain = tf.keras.layers.BatchNormalization(momentum=0.0)
    synced = hvd.SyncBatchNormalization(momentum=0.0)
    plain(x, training=True)
    synced(x, training=True)
    everything = hvd.allgather(x, name="batch_norm_views").numpy()
    mine = x.numpy()

    def as_list(a):
        return [float(v) for v in np.asarray(a)]

    return {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "batch": len(mine),
        "own_mean": as_list(mine.mean(0)),
        "own_var": as_list(mine.var(0)),
        "global_mean": as_list(everything.mean(0)),
        "global_var": as_list(everything.var(0)),
        "bn_moving_mean": as_list(plain.moving_mean.numpy()),
        "bn_moving_var": as_list(plain.moving_variance.numpy()),
        "sync_moving_mean": as_list(synced.moving_mean.numpy()),
        "sync_moving_var": as_list(synced.moving_variance.numpy()),
    }


def main(argv=None) -> int:
    """Under a Horovod launcher: each rank reports its batch-normalisation statistics (``RankRun.results``)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument(
        "--per-rank-batch",
        type=int,
        nargs="+",
        default=[8],
        help="batch size of one rank (several: one report each)",
    )
    args = parser.parse_args(argv)
    if min(args.per_rank_batch) < 2:
        parser.error("--per-rank-batch: a batch needs at least 2 samples to have a variance")

    import horovod.tensorflow as hvd

    from hvdcourse.examples import data
    from hvdcourse.runtime.results import report

    hvd.init()
    images = data.shard(data.load_mnist(quiet=True).x_train, hvd.rank(), hvd.size())
    if max(args.per_rank_batch) > len(images):
        parser.error(f"--per-rank-batch: a rank's shard has only {len(images)} images")
    for batch in args.per_rank_batch:
        views = batch_norm_views(quadrant_features(images[:batch]))
        print(
            f"[batchnorm] rank {views['rank']}, batch {batch}: own means "
            f"{[round(m, 4) for m in views['own_mean']]}, all ranks' {[round(m, 4) for m in views['global_mean']]}",
            flush=True,
        )  # for a person; the caller gets:
        report(views)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
