"""Single-worker MNIST trainer: the starting point of the conversion (lesson: Converting a Keras MNIST script to Horovod).

Run: ``python -m hvdcourse.examples.train_single --epochs 3``. Its Horovod twin, ``train_hvd.py``, has the
same lines in the same order plus the ``# Horovod:`` ones.
"""

from __future__ import annotations

import sys

from hvdcourse.examples import data, training
from hvdcourse.examples.cli import training_parser
from hvdcourse.examples.model import build_model, loss_fn


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks (e.g. a profiler)."""
    args = training_parser("Train the course's MNIST CNN on one worker.").parse_args(argv)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import tensorflow as tf

    threads = training.set_threads(args.threads)
    tf.keras.utils.set_random_seed(args.seed)

    dataset = data.load_mnist(args.data, download=args.download)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    steps = training.steps_per_epoch(len(x_train), args.batch_size, max_steps=args.max_steps)

    model = build_model()
    lr = args.lr
    optimizer = tf.keras.optimizers.Adam(learning_rate=lr)
    model.compile(optimizer=optimizer, loss=loss_fn(), metrics=["accuracy"])

    callbacks = list(callbacks)
    checkpoint = training.EpochCheckpoint(args.checkpoint_dir, model, optimizer)
    callbacks.append(checkpoint.callback())
    initial_epoch = training.resume_from_checkpoint(checkpoint, args.resume)
    verbose = 2

    print(
        f"[train_single] data={dataset.source} threads={threads} batch={args.batch_size} "
        f"lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
        flush=True,
    )
    # Shuffled batches, from the first one not yet trained on (all of them, unless the run resumes).
    batches = training.train_dataset(
        x_train, y_train, args.batch_size, args.seed, start_step=initial_epoch * steps
    )
    model.fit(
        batches,
        steps_per_epoch=steps,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        validation_data=(x_test, y_test),
        callbacks=callbacks,
        verbose=verbose,
    )

    metrics = training.evaluate(model, x_test, y_test)
    return training.finish(
        "train_single", metrics, model, args.metrics_json, lr=lr, steps_per_epoch=steps
    )


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
