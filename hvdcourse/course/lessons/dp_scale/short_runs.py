"""Short trainings of the course's MNIST model, on one process or on Horovod's ranks (lesson: Data
parallelism at scale).

Every rank builds the model from the same seed, so all ranks start from the same weights without a
broadcast, and trains on its own shard of the data (:func:`hvdcourse.examples.data.shard`) with
plain SGD with momentum. One function, :func:`short_training`, serves the three measurements of
the lesson: gradient compression (``compression``), mixed precision (``policy``) and the
learning-rate rules for large batches (:func:`scaled_lr`, ``warmup_steps``).
"""

from __future__ import annotations

import time

import numpy as np

from hvdcourse.runtime.errors import UsageError

RULES = ("none", "linear", "sqrt", "linear+warmup")


def scaled_lr(rule: str, base_lr: float, base_batch: int, batch: int) -> float:
    """The learning rate ``rule`` gives a global ``batch``, from ``base_lr`` tuned at ``base_batch``.

    ``none`` keeps ``base_lr``; ``linear`` (Goyal et al. 2017) multiplies it by ``batch / base_batch``;
    ``sqrt`` (Krizhevsky 2014, Hoffer et al. 2017) by the square root of that ratio;
    ``linear+warmup`` is ``linear`` reached after a warm-up (see :func:`warmup_schedule`).
    """
    from hvdcourse.examples.training import lr_multiplier

    if rule not in RULES:
        raise UsageError(f"unknown learning-rate rule {rule!r}; use one of {', '.join(RULES)}")
    return base_lr * lr_multiplier(rule.replace("+warmup", ""), batch / base_batch)


def warmup_lr(step: int, start_lr: float, target_lr: float, warmup_steps: int) -> float:
    """Linear warm-up: ``start_lr`` at step 0 rising to ``target_lr`` at step ``warmup_steps``, then flat."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return target_lr
    return start_lr + (target_lr - start_lr) * step / warmup_steps


def warmup_schedule(start_lr: float, target_lr: float, warmup_steps: int):
    """:func:`warmup_lr` as a Keras schedule (the step is the optimizer's ``iterations``): Keras'
    ``PolynomialDecay`` with power 1 is a straight line from its initial to its end rate, and it may
    rise; being built in, it survives the re-creation of the optimizer by ``hvd.DistributedOptimizer``."""
    import tensorflow as tf

    return tf.keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate=start_lr,
        decay_steps=max(warmup_steps, 1),
        end_learning_rate=target_lr,
        power=1.0,
    )


def load_data(rank: int = 0, size: int = 1):
    """This rank's shard of the training images and labels, and the whole test set (model inputs)."""
    from hvdcourse.examples import data

    dataset = data.load_mnist(quiet=True)
    x, y = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    return data.shard(x, rank, size), data.shard(y, rank, size), x_test, y_test


MODELS = ("cnn", "mlp")


def build(policy: str = "float32", seed: int = 0, model: str = "cnn"):
    """The course's CNN (``model="cnn"``) or a one-hidden-layer perceptron (``"mlp"``, 13 times
    fewer operations per image: for the many short runs of the learning-rate rules) under the Keras
    dtype ``policy``, with float32 logits, from ``seed``.

    Under ``mixed_bfloat16`` the layers compute in bfloat16 and keep float32 weights; the last
    ``Activation`` casts the logits back to float32, as Keras' mixed-precision guide advises, so the
    loss is computed in float32. The global policy is restored afterwards.
    """
    import tensorflow as tf

    from hvdcourse.examples.model import build_model

    if model not in MODELS:
        raise UsageError(f"unknown model {model!r}; use one of {', '.join(MODELS)}")
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(policy)
    try:
        tf.keras.utils.set_random_seed(seed)
        layers = tf.keras.layers
        body = (
            build_model()
            if model == "cnn"
            else tf.keras.Sequential(
                [layers.Flatten(), layers.Dense(64, activation="relu"), layers.Dense(10)]
            )
        )
        network = tf.keras.Sequential([body, layers.Activation("linear", dtype="float32")])
        network.build((None, 28, 28, 1))
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)
    return network


class _StepTimes:
    """Seconds of every training step (``on_train_batch_begin`` to ``on_train_batch_end``)."""

    def __init__(self):
        import tensorflow as tf

        outer = self

        class Callback(tf.keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                outer._start = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                outer.times.append(time.perf_counter() - outer._start)

        self.times, self._start, self.callback = [], 0.0, Callback()


def short_training(
    hvd=None,
    *,
    batch_size: int = 32,
    lr: float = 0.05,
    epochs: int = 1,
    max_steps: int | None = None,
    warmup_steps: int = 0,
    start_lr: float | None = None,
    compression=None,
    policy: str = "float32",
    momentum: float = 0.9,
    seed: int = 0,
    model: str = "cnn",
) -> dict:
    """Train the course's CNN briefly; with ``hvd`` (``horovod.tensorflow.keras``, initialised) on
    all its ranks through ``hvd.DistributedOptimizer(..., compression=compression)``.

    ``model`` is ``"cnn"`` or ``"mlp"`` (:func:`build`); ``batch_size`` is per rank (the global
    batch is ``batch_size * hvd.size()``); ``max_steps`` caps
    the steps of each epoch; with ``warmup_steps`` the rate rises linearly from ``start_lr`` to ``lr``.
    Returns the test ``accuracy`` and ``loss`` (whole test set, on every rank), ``train_loss`` of
    the last epoch, ``steps``, ``global_batch``, ``step_time`` (median seconds of a step, first step
    excluded), ``seconds`` (the whole ``fit``) and ``weights_sha256`` (equal on every rank).
    """
    import tensorflow as tf

    from hvdcourse.examples.model import loss_fn, weights_digest

    rank, size = (hvd.rank(), hvd.size()) if hvd is not None else (0, 1)
    x, y, x_test, y_test = load_data(rank, size)
    network = build(policy, seed, model)  # the same weights on every rank
    tf.keras.utils.set_random_seed(seed + 1 + rank)  # each rank shuffles its own shard its own way
    rate = (
        warmup_schedule(start_lr if start_lr is not None else lr, lr, warmup_steps)
        if warmup_steps
        else lr
    )
    optimizer = tf.keras.optimizers.SGD(learning_rate=rate, momentum=momentum)
    if hvd is not None:
        optimizer = hvd.DistributedOptimizer(
            optimizer, compression=compression if compression is not None else hvd.Compression.none
        )
    network.compile(optimizer=optimizer, loss=loss_fn(), metrics=["accuracy"])
    steps = len(x) // batch_size
    if max_steps:
        steps = min(steps, max_steps)
    if steps < 1:
        raise UsageError(
            f"a batch of {batch_size} per rank is larger than this rank's {len(x)} images"
        )
    timer = _StepTimes()
    start = time.perf_counter()
    history = network.fit(
        x[: steps * batch_size],
        y[: steps * batch_size],
        batch_size=batch_size,
        epochs=epochs,
        shuffle=True,
        verbose=0,
        callbacks=[timer.callback],
    )
    seconds = time.perf_counter() - start
    loss, accuracy = network.evaluate(x_test, y_test, batch_size=500, verbose=0)
    return {
        "accuracy": float(accuracy),
        "loss": float(loss),
        "train_loss": float(history.history["loss"][-1]),
        "steps": steps * epochs,
        "global_batch": batch_size * size,
        "step_time": float(np.median(timer.times[1:] if len(timer.times) > 1 else timer.times)),
        "seconds": seconds,
        "weights_sha256": weights_digest(network),
    }


def lr_rule_runs(
    hvd,
    global_batches=(64, 256, 1024),
    rules=RULES,
    base_lr: float = 0.02,
    epochs: int = 2,
    warmup_epochs: float = 1.0,
    seed: int = 0,
    model: str = "mlp",
) -> list:
    """One short training per global batch and rule (the smallest batch is the base: one run).

    Returns rows ``{"global_batch", "rule", "lr", "accuracy", "loss", "steps", "seconds"}``; every
    rank returns the same rows (the weights are the same on every rank).
    """
    size = hvd.size() if hvd is not None else 1
    base_batch = min(global_batches)
    rows = []
    for batch in sorted(global_batches):
        if batch % size:
            raise UsageError(f"a global batch of {batch} cannot be split over {size} ranks")
        for rule in rules if batch != base_batch else ("none",):
            lr = scaled_lr(rule, base_lr, base_batch, batch)
            steps_per_epoch = len(load_data(0, size)[0]) // (batch // size)
            warmup = int(round(warmup_epochs * steps_per_epoch)) if rule.endswith("warmup") else 0
            run = short_training(
                hvd,
                batch_size=batch // size,
                lr=lr,
                epochs=epochs,
                warmup_steps=warmup,
                start_lr=base_lr,
                seed=seed,
                model=model,
            )
            rows.append(
                {
                    "global_batch": batch,
                    "rule": rule if batch != base_batch else "base",
                    "lr": lr,
                    "accuracy": run["accuracy"],
                    "loss": run["loss"],
                    "steps": run["steps"],
                    "seconds": run["seconds"],
                }
            )
    return rows


def machine_line() -> str:
    """One line naming the machine the measurements ran on: CPU, cores, memory, load average."""
    from hvdcourse.runtime.machine import describe_machine

    m = describe_machine()
    load = m["load_average_1_5_15min"]
    return (
        f"{m['cpu_model']}, {m['logical_cores']} cores, {m['memory_gib']:.0f} GiB "
        f"(load average {load[0]:.1f} over the last minute), {m['date'][:10]}"
    )
