"""Gradient accumulation with Horovod's ``DistributedOptimizer`` (lesson: Data parallelism at scale).

``hvd.DistributedOptimizer(opt, backward_passes_per_step=k)`` adds up the gradients of ``k``
batches locally and allreduces and applies them on every ``k``-th batch only: ``k`` times fewer
allreduces, and a step made of ``k`` batches per rank, with the memory of one.
With ``average_aggregated_gradients=True`` the sum is divided by ``k``, which makes the step the
one of a ``k`` times larger batch (the loss is a mean over the batch); with ``False`` (the
default) the gradient is ``k`` times larger: the same step as the large batch with ``k`` times the
learning rate. :func:`accumulation_check` runs all of them from the same weights and compares.
"""

from __future__ import annotations

import numpy as np


def _weights(model) -> list:
    return [w.numpy().astype(np.float64) for w in model.trainable_weights]


def _max_diff(a: list, b: list) -> float:
    return float(max(np.max(np.abs(x - y)) for x, y in zip(a, b)))


def train_steps(hvd, x, y, batch: int, lr: float, seed: int = 0, **distributed) -> tuple:
    """(weights before, weights after) one pass of ``fit`` over ``x, y`` in batches of ``batch``,
    with ``hvd.DistributedOptimizer(SGD(lr), **distributed)`` on the course's CNN built from ``seed``."""
    import tensorflow as tf

    from hvdcourse.course.lessons.dp_scale.short_runs import build
    from hvdcourse.examples.model import loss_fn

    model = build(seed=seed)
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=lr), **distributed)
    model.compile(optimizer=optimizer, loss=loss_fn())
    before = _weights(model)
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return before, _weights(model)


def accumulation_check(
    hvd, k: int = 4, micro_batch: int = 8, lr: float = 0.1, seed: int = 0
) -> dict:
    """Compare, from the same weights on every rank, one step of ``k * micro_batch`` examples per
    rank with ``k`` micro-batches accumulated by ``backward_passes_per_step=k``.

    Returns ``update`` (the largest weight change of the large-batch step, for scale) and the
    largest weight differences: ``averaged`` (``average_aggregated_gradients=True`` against the
    large batch), ``summed`` (``False`` against the large batch) and ``summed_vs_k_lr`` (``False``
    against the large batch with ``k * lr``); ``allreduces`` per step: how many batches a step took.
    """
    from hvdcourse.course.lessons.dp_scale.short_runs import load_data

    x, y, _, _ = load_data(hvd.rank(), hvd.size())
    x, y = x[: k * micro_batch], y[: k * micro_batch]
    before, large = train_steps(hvd, x, y, k * micro_batch, lr, seed)
    _, large_k_lr = train_steps(hvd, x, y, k * micro_batch, k * lr, seed)
    _, averaged = train_steps(
        hvd,
        x,
        y,
        micro_batch,
        lr,
        seed,
        backward_passes_per_step=k,
        average_aggregated_gradients=True,
    )
    _, summed = train_steps(
        hvd,
        x,
        y,
        micro_batch,
        lr,
        seed,
        backward_passes_per_step=k,
        average_aggregated_gradients=False,
    )
    return {
        "k": k,
        "micro_batch": micro_batch,
        "global_batch": k * micro_batch * hvd.size(),
        "update": _max_diff(large, before),
        "averaged": _max_diff(averaged, large),
        "summed": _max_diff(summed, large),
        "summed_vs_k_lr": _max_diff(summed, large_k_lr),
    }
