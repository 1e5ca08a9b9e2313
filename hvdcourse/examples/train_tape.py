"""Horovod MNIST trainer with a custom training loop (lesson: Converting a Keras MNIST script to Horovod).

The same model, data and options as ``train_hvd.py``, but the training step is written by hand with
``tf.GradientTape``: Horovod then needs ``hvd.DistributedGradientTape`` (instead of
``DistributedOptimizer``) and an explicit ``hvd.broadcast_variables`` before the first step (instead
of ``BroadcastGlobalVariablesCallback``). Run: ``horovodrun -np 2 -H localhost:2 --gloo python -m
hvdcourse.examples.train_tape --epochs 3``.
"""

from __future__ import annotations

import sys


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
    from hvdcourse.examples.cli import training_parser

    args = training_parser(
        "Train the course's MNIST CNN with Horovod and a custom training loop."
    ).parse_args(argv)

    import tensorflow as tf
    import horovod.tensorflow as hvd  # Horovod: the plain TensorFlow flavour (no Keras callbacks)

    from hvdcourse.examples import data, model as course_model, training
    from hvdcourse.runtime import devices

    hvd.init()  # Horovod: start the runtime
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:  # Horovod: one GPU per process (the launcher's choice, else GPU local_rank)
        mine = devices.gpu_index(len(gpus), hvd.local_rank(), hvd.local_size())
        tf.config.set_visible_devices(gpus[mine], "GPU")
    training.set_threads(args.threads, hvd.local_size())  # Horovod: share the node's cores
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())  # Horovod: different shuffles per rank

    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    # Horovod: each rank trains on its own part
    x_train = data.shard(x_train, hvd.rank(), hvd.size())
    y_train = data.shard(y_train, hvd.rank(), hvd.size())
    # Horovod: evaluation is summed over ranks below
    x_test = data.shard(x_test, hvd.rank(), hvd.size())
    y_test = data.shard(y_test, hvd.rank(), hvd.size())
    steps = training.steps_per_epoch(
        len(dataset.x_train), args.batch_size, hvd.size(), args.max_steps
    )

    model = course_model.build_model()
    loss = course_model.loss_fn()
    # Horovod: the effective batch is N times larger; Adam's rate grows by sqrt(N)
    lr = training.scaled_lr(args.lr, hvd.size(), "adam")
    warmup_steps = int(args.warmup_epochs * steps)
    optimizer = tf.keras.optimizers.Adam(learning_rate=warmup_lr(0, lr, hvd.size(), warmup_steps))

    # Horovod: create Adam's state now, to restore and broadcast it
    optimizer.build(model.trainable_variables)
    checkpoint = training.EpochCheckpoint(args.checkpoint_dir, model, optimizer)
    # Horovod: rank 0 restores; every rank starts from rank 0's epoch, weights and optimizer state (moments,
    # step count), restored or new, before the first step: the first averaged gradient comes from one model.
    # Horovod: resume together
    initial_epoch = training.resume_from_checkpoint(
        checkpoint,
        args.resume,
        hvd.rank(),
        # Horovod: rank 0 -> all
        hvd.broadcast_object,
        hvd.broadcast_variables,
    )

    @tf.function
    def training_step(images, labels):
        with tf.GradientTape() as tape:
            loss_value = loss(labels, model(images, training=True))
        # Horovod: gradient() returns rank-averaged gradients
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss_value, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss_value

    if hvd.rank() == 0:  # Horovod: one header, not N
        print(
            f"[train_tape] data={dataset.source} ranks={hvd.size()} batch/rank={args.batch_size} "
            f"lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
            flush=True,
        )
    step = initial_epoch * steps
    batches = iter(
        training.train_dataset(
            x_train, y_train, args.batch_size, args.seed + hvd.rank(), start_step=step
        )
    )  # the batches not yet seen
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
        # Horovod: the mean training loss of all ranks (each saw different batches)
        train_loss = float(
            hvd.allreduce(tf.constant(total / steps), op=hvd.Average, name="train_loss")
        )
        metrics = training.evaluate(
            model, x_test, y_test, reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum)
        )
        if hvd.rank() == 0:  # Horovod: rank 0 logs and writes the checkpoint
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
    result = training.report_final_metrics(metrics, hvd.size(), model)  # Horovod: size() workers
    print(
        f"[train_tape] rank={hvd.rank()} test_accuracy={result['accuracy']:.4f} "
        f"weights_sha256={result['weights_sha256']}",
        flush=True,
    )
    if hvd.rank() == 0:  # Horovod: one metrics file
        training.write_metrics(args.metrics_json, result)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
