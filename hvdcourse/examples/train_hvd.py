"""Horovod MNIST trainer: ``train_single.py`` plus the ``# Horovod:`` lines (lesson: Converting a Keras MNIST script to Horovod).

Run on 2 ranks with any of:
``horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.examples.train_hvd``,
``horovodrun -np 2 -H localhost:2 --mpi python -m hvdcourse.examples.train_hvd``,
``mpirun -np 2 python -m hvdcourse.examples.train_hvd``, or ``srun --mpi=pmix python -m hvdcourse.examples.train_hvd``.
"""

from __future__ import annotations

import sys


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks (e.g. a profiler, see :mod:`hvdcourse.course.timeline`)."""
    from hvdcourse.examples.cli import training_parser

    args = training_parser(
        "Train the course's MNIST CNN with Horovod on N workers.", live_metrics=True
    ).parse_args(argv)

    import tensorflow as tf
    import horovod.tensorflow.keras as hvd  # Horovod: the Keras flavour of the API

    # Horovod: objects, variables: rank 0 -> all
    from horovod.tensorflow import broadcast_object, broadcast_variables

    from hvdcourse.examples import data, model as course_model, training
    from hvdcourse.runtime import devices

    hvd.init()  # Horovod: start the runtime; rank, size and local_rank are known from here on
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        # Horovod: one GPU per process: the launcher's choice, else GPU local_rank (an error when
        # the node has more processes than GPUs)
        mine = devices.gpu_index(len(gpus), hvd.local_rank(), hvd.local_size())
        tf.config.set_visible_devices(gpus[mine], "GPU")
    # Horovod: share the node's cores
    threads = training.set_threads(args.threads, hvd.local_size())
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())  # Horovod: different shuffles per rank

    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    # Horovod: each rank trains on its own part
    x_train = data.shard(x_train, hvd.rank(), hvd.size())
    y_train = data.shard(y_train, hvd.rank(), hvd.size())  # Horovod: (same slicing for the labels)
    # Horovod: validation split too; metrics get
    x_test = data.shard(x_test, hvd.rank(), hvd.size())
    y_test = data.shard(y_test, hvd.rank(), hvd.size())  # Horovod: averaged, not judged on 1/N
    steps = training.steps_per_epoch(
        len(dataset.x_train), args.batch_size, hvd.size(), args.max_steps
    )

    model = course_model.build_model()
    # Horovod: the effective batch is N times larger; Adam's rate grows by sqrt(N)
    lr = training.scaled_lr(args.lr, hvd.size(), "adam")
    optimizer = tf.keras.optimizers.Adam(learning_rate=lr)
    optimizer = hvd.DistributedOptimizer(optimizer)  # Horovod: average gradients with allreduce
    model.compile(optimizer=optimizer, loss=course_model.loss_fn(), metrics=["accuracy"])
    # Horovod: create Adam's state now, to restore and broadcast it
    optimizer.build(model.trainable_variables)
    if args.metrics_port is not None:  # live metrics for Prometheus (off by default)
        from hvdcourse.examples import live_metrics

        # Horovod: one port per rank of a node
        served = live_metrics.serve(args.metrics_port, hvd.rank(), hvd.local_rank())
        # Horovod: time the gradients' allreduce inside the step
        waited = live_metrics.time_allreduce(optimizer)
        callbacks = (*callbacks, live_metrics.keras_callback(served, args.batch_size, waited))

    callbacks = [
        # Horovod: rank 0's state to all after batch 1
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average metrics (incl. validation) over ranks
        hvd.callbacks.MetricAverageCallback(),
        *callbacks,
    ]
    if args.warmup_epochs > 0:
        # Horovod: ramp lr/N -> lr (Goyal 2017)
        callbacks.append(
            hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=lr,
                warmup_epochs=args.warmup_epochs,
                steps_per_epoch=steps,
                verbose=1 if hvd.rank() == 0 else 0,
            )
        )
    checkpoint = training.EpochCheckpoint(args.checkpoint_dir, model, optimizer)
    if hvd.rank() == 0:  # Horovod: only rank 0 writes checkpoints, others would corrupt them
        callbacks.append(checkpoint.callback())
    # Horovod: rank 0 restores; the epoch (or rank 0's error), then rank 0's weights and optimizer state, go to
    # every rank BEFORE the first step (the callback's broadcast after batch 1 is too late for a resumed run)
    initial_epoch = training.restore_together(  # Horovod: resume together, rank 0 -> all
        checkpoint, args.resume, hvd.rank(), broadcast_object, broadcast_variables
    )
    verbose = 2 if hvd.rank() == 0 else 0  # Horovod: log on rank 0 only

    if hvd.rank() == 0:  # Horovod: one header, not N
        print(
            f"[train_hvd] data={dataset.source} ranks={hvd.size()} threads/rank={threads} "
            f"batch/rank={args.batch_size} lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
            flush=True,
        )
    model.fit(
        training.train_dataset(
            x_train,
            y_train,
            args.batch_size,
            args.seed + hvd.rank(),
            start_step=initial_epoch * steps,
        ),  # the batches not yet seen
        steps_per_epoch=steps,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        validation_data=(x_test, y_test),
        callbacks=callbacks,
        verbose=verbose,
    )

    metrics = training.evaluate(
        model,
        x_test,
        y_test,
        # Horovod: whole test set
        reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum),
    )
    # Horovod: size() workers
    metrics = training.metrics_record(metrics, hvd.size(), model, lr=lr, steps_per_epoch=steps)
    print(
        f"[train_hvd] rank={hvd.rank()} test_loss={metrics['loss']:.4f} "
        f"test_accuracy={metrics['accuracy']:.4f} weights_sha256={metrics['weights_sha256']}",
        flush=True,
    )
    if hvd.rank() == 0:  # Horovod: one metrics file
        training.write_metrics(args.metrics_json, metrics)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_main

    sys.exit(run_main(main))
