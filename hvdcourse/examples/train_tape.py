"""Horovod MNIST trainer with a custom training loop (lesson: Converting a Keras MNIST script to Horovod).

The same model, data and options as ``train_hvd.py``, but the training step is written by hand with
``tf.GradientTape``: Horovod then needs ``hvd.DistributedGradientTape`` (instead of
``DistributedOptimizer``) and an explicit ``hvd.broadcast_variables`` before the first step (instead
of ``BroadcastGlobalVariablesCallback``). Run: ``horovodrun -np 2 -H localhost:2 --gloo python -m
hvdcourse.examples.train_tape --epochs 3``.
"""

from __future__ import annotations

import sys

from hvdcourse.examples import data, training
from hvdcourse.examples.cli import training_parser
from hvdcourse.examples.model import build_model, loss_fn
from hvdcourse.runtime import devices


def warmup_lr(step: int, lr: float, workers: int, warmup_steps: int) -> float:
    """Learning rate at ``step``: a linear ramp from ``lr / workers`` to ``lr`` over ``warmup_steps``.

    The ramp of Horovod's ``LearningRateWarmupCallback``, which always starts at ``lr / workers``
    (the single-worker rate under the linear rule; below it under the square-root rule for Adam).
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr
    return lr / workers + (lr - lr / workers) * step / warmup_steps


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: Keras callbacks called at each batch's start and end (e.g. fault injection),
    with the optimizer in their ``params`` (the model is not compiled)."""
    args = training_parser(
        "Train the course's MNIST CNN with Horovod and a custom training loop."
    ).parse_args(argv)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import tensorflow as tf

    # Horovod: the plain TensorFlow flavour of Horovod's API (no Keras callbacks).
    import horovod.tensorflow as hvd

    # Horovod: start the runtime; rank, size and local_rank are known from here on.
    hvd.init()
    # Horovod: pin one GPU per process: the one the launcher left it, else GPU number local_rank.
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        mine = devices.gpu_index(len(gpus), hvd.local_rank(), hvd.local_size())
        tf.config.set_visible_devices(gpus[mine], "GPU")
    # Horovod: the processes of a node share its cores.
    training.set_threads(args.threads, hvd.local_size())
    # Horovod: each rank its own random seed (rank 0's weights are sent to every rank below).
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())

    # Horovod: rank 0 alone says where the data comes from.
    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    # Horovod: each rank trains on its own part of the data, every N-th image.
    x_train = data.shard(x_train, hvd.rank(), hvd.size())
    y_train = data.shard(y_train, hvd.rank(), hvd.size())
    # Horovod: each rank tests on its own part; the sums of all ranks are added up below.
    x_test = data.shard(x_test, hvd.rank(), hvd.size())
    y_test = data.shard(y_test, hvd.rank(), hvd.size())
    # Horovod: N ranks make one pass over the data in N times fewer steps, the same number on each.
    steps = training.steps_per_epoch(
        len(dataset.x_train), args.batch_size, hvd.size(), args.max_steps
    )

    model = build_model()
    loss = loss_fn()
    # Horovod: the effective batch is N times larger, so the rate grows: for Adam, by sqrt(N).
    lr = training.scaled_lr(args.lr, hvd.size(), "adam")
    warmup_steps = int(args.warmup_epochs * steps)
    optimizer = tf.keras.optimizers.Adam(learning_rate=warmup_lr(0, lr, hvd.size(), warmup_steps))

    # Horovod: create Adam's state now, so that it can be restored and broadcast.
    optimizer.build(model.trainable_variables)
    checkpoint = training.EpochCheckpoint(args.checkpoint_dir, model, optimizer)
    # Horovod: rank 0 restores the latest checkpoint; every rank starts from rank 0's epoch, weights
    # and optimizer state (moments, step count), restored or new, so that the first averaged gradient
    # comes from one model.
    initial_epoch = training.resume_from_checkpoint(
        checkpoint, args.resume, hvd.rank(), hvd.broadcast_object, hvd.broadcast_variables
    )

    @tf.function
    def training_step(images, labels):
        with tf.GradientTape() as tape:
            loss_value = loss(labels, model(images, training=True))
        # Horovod: the wrapped tape's gradient() returns the gradients averaged over the ranks.
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss_value, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss_value

    # Horovod: one header from rank 0, not N.
    if hvd.rank() == 0:
        print(
            f"[train_tape] data={dataset.source} ranks={hvd.size()} batch/rank={args.batch_size} "
            f"lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
            flush=True,
        )
    step = initial_epoch * steps
    # Horovod: each rank's batches from its own part, in its own order, from the first one not yet
    # trained on (all of them, unless the run resumes).
    batches = iter(
        training.train_dataset(
            x_train, y_train, args.batch_size, args.seed + hvd.rank(), start_step=step
        )
    )
    callbacks = tf.keras.callbacks.CallbackList(list(callbacks), model=model, optimizer=optimizer)
    metrics = None
    for epoch in range(initial_epoch, args.epochs):
        total = 0.0
        for batch in range(steps):
            callbacks.on_train_batch_begin(batch)
            optimizer.learning_rate.assign(warmup_lr(step, lr, hvd.size(), warmup_steps))
            images, labels = next(batches)
            total += float(training_step(images, labels))
            step += 1
            callbacks.on_train_batch_end(batch)
        # Horovod: the mean training loss of all ranks (each saw different batches).
        train_loss = float(
            hvd.allreduce(tf.constant(total / steps), op=hvd.Average, name="train_loss")
        )
        # Horovod: every rank's sums are added up: the loss and accuracy of the whole test set.
        metrics = training.evaluate(
            model, x_test, y_test, reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum)
        )
        # Horovod: rank 0 alone logs and saves (N processes writing one file would corrupt it).
        if hvd.rank() == 0:
            checkpoint.save(epoch + 1)
            print(
                f"[train_tape] epoch {epoch + 1}/{args.epochs} lr={float(optimizer.learning_rate):.2e} "
                f"loss={train_loss:.4f} val_loss={metrics['loss']:.4f} "
                f"val_accuracy={metrics['accuracy']:.4f}",
                flush=True,
            )

    # resumed after the last epoch: nothing was trained, evaluate what was restored
    if metrics is None:
        metrics = training.evaluate(
            model, x_test, y_test, reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum)
        )
    # Horovod: every rank prints its result (equal digests: equal weights); rank 0 writes the file.
    return training.finish(
        "train_tape", metrics, model, args.metrics_json, workers=hvd.size(), rank=hvd.rank()
    )


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
