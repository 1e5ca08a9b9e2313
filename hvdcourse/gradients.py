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

    from hvdcourse.model import loss_fn

    with tf.GradientTape() as tape:
        loss = loss_fn()(y, model(x, training=False))  # the mean over the samples
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def split_sizes(total: int, workers: int) -> list:
    """Equal shard sizes for ``workers`` workers; raises if ``total`` is not divisible (as in the equation)."""
    if workers < 1 or total % workers:
        raise ValueError(f"{total} samples do not split into {workers} equal shards; "
                         "pass explicit sizes for unequal shards")
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
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=float) / np.sum(weights)
    return [sum(wk * grads[i] for wk, grads in zip(w, per_worker)) for i in range(len(per_worker[0]))]


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


def check_data_parallel_gradient(model, x, y, workers: int = 2, sizes: Sequence | None = None,
                                 weighted: bool = False, tolerance: float = 1e-5) -> GradientCheck:
    """Compare the full-batch gradient with the average of the workers' shard gradients.

    ``sizes`` (default: equal shards) sets how many samples each worker gets; ``weighted`` weights
    each worker's gradient by its share of the samples. float32 arithmetic: agreement means a
    relative difference around 1e-7, far below ``tolerance``.
    """
    sizes = list(sizes) if sizes is not None else split_sizes(len(x), workers)
    full = loss_gradients(model, x, y)
    averaged = average(shard_gradients(model, x, y, sizes), weights=sizes if weighted else None)
    return GradientCheck(sizes, weighted, max_relative_difference(averaged, full), tolerance)
