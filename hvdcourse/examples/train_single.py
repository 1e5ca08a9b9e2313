"""Single-worker MNIST trainer: the starting point of the conversion (lesson: Converting a Keras MNIST script to Horovod).

Run: ``python -m hvdcourse.examples.train_single --epochs 3``. Its Horovod twin, ``train_hvd.py``, has the
same lines in the same order plus the ``# Horovod:`` ones.
"""

from __future__ import annotations

import sys


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks (e.g. a profiler)."""
    from hvdcourse.examples.cli import training_parser

    args = training_parser("Train the course's MNIST CNN on one worker.").parse_args(argv)

    import tensorflow as tf

    from hvdcourse.examples import data, model as course_model, training

    threads = training.set_threads(args.threads)
    tf.keras.utils.set_random_seed(args.seed)

    dataset = data.load_mnist(args.data, download=args.download)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    steps = training.steps_per_epoch(len(x_train), args.batch_size, 1, args.max_steps)

    model = course_model.build_model()
    lr = args.lr
    optimizer = tf.keras.optimizers.Adam(learning_rate=lr)
    model.compile(optimizer=optimizer, loss=course_model.loss_fn(), metrics=["accuracy"])

    callbacks = [*callbacks]
    checkpoint = training.EpochCheckpoint(args.checkpoint_dir, model, optimizer)
    callbacks.append(checkpoint.callback())
    initial_epoch = training.restore_together(checkpoint, args.resume)
    verbose = 2

    print(
        f"[train_single] data={dataset.source} threads={threads} batch={args.batch_size} "
        f"lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
        flush=True,
    )
    model.fit(
        training.train_dataset(
            x_train, y_train, args.batch_size, args.seed, start_step=initial_epoch * steps
        ),  # the batches not yet seen
        steps_per_epoch=steps,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        validation_data=(x_test, y_test),
        callbacks=callbacks,
        verbose=verbose,
    )

    metrics = training.metrics_record(
        training.evaluate(model, x_test, y_test), 1, model, lr=lr, steps_per_epoch=steps
    )
    print(
        f"[train_single] test_loss={metrics['loss']:.4f} test_accuracy={metrics['accuracy']:.4f} "
        f"weights_sha256={metrics['weights_sha256']}",
        flush=True,
    )
    training.write_metrics(args.metrics_json, metrics)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_main

    sys.exit(run_main(main))
