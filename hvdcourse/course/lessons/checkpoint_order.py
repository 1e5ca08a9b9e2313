"""Which epoch does rank 0's ``ModelCheckpoint(save_best_only=True)`` keep, placed before or after
``MetricAverageCallback``? (lesson: Converting a Keras MNIST script to Horovod)

Run under Horovod (rank 0 reports the result to the launcher, :func:`training.report`)::

    horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.course.lessons.checkpoint_order --out DIR

Every rank trains the course's model and validates on its own shard of the test set, as the source
documents' code does. Rank 0 registers two checkpoint callbacks that monitor ``val_loss`` with
``save_best_only=True``: one before ``MetricAverageCallback`` (it reads rank 0's own validation
loss), one after it (it reads the average over the ranks). Each writes its own files, one per epoch
it judged best; the last one written is the checkpoint a user would keep.
"""

from __future__ import annotations

import argparse
import os
import re
import sys


def saved_epochs(folder: str, prefix: str) -> list:
    """The epochs (1-based) of the checkpoints ``<prefix>-<epoch>`` written in ``folder``."""
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)\.index$")
    return sorted(int(m.group(1)) for m in map(pattern.match, os.listdir(folder)) if m)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for rank 0's checkpoint files")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-images", type=int, default=2000, help="first N training images")
    parser.add_argument(
        "--test-images", type=int, default=400, help="first N test images, shared by the ranks"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    import tensorflow as tf
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd

    from hvdcourse.examples import data, model as course_model, training

    hvd.init()
    training.set_threads(0, hvd.local_size())
    dataset = data.load_mnist(quiet=True)
    x_train, y_train = data.to_model_inputs(
        dataset.x_train[: args.train_images], dataset.y_train[: args.train_images]
    )
    x_test, y_test = data.to_model_inputs(
        dataset.x_test[: args.test_images], dataset.y_test[: args.test_images]
    )

    def shard(a):
        return data.shard(a, hvd.rank(), hvd.size())

    tf.keras.utils.set_random_seed(args.seed)
    model = course_model.build_model()
    model.compile(
        optimizer=hvd.DistributedOptimizer(
            tf.keras.optimizers.Adam(training.scaled_lr(1e-3, hvd.size(), "adam"))
        ),
        loss=course_model.loss_fn(),
        metrics=["accuracy"],
    )
    own, averaged = [], []

    class Record(tf.keras.callbacks.Callback):
        def __init__(self, into):
            super().__init__()
            self.into = into

        def on_epoch_end(self, epoch, logs=None):
            self.into.append(float(logs["val_loss"]))

    def checkpoint(prefix):
        return tf.keras.callbacks.ModelCheckpoint(
            os.path.join(args.out, prefix + "-{epoch:02d}"),
            monitor="val_loss",
            save_best_only=True,
            save_weights_only=True,
        )

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), Record(own)]
    if hvd.rank() == 0:
        os.makedirs(args.out, exist_ok=True)
        callbacks.append(checkpoint("before"))  # reads rank 0's own val_loss
    callbacks += [hvd.callbacks.MetricAverageCallback(), Record(averaged)]
    if hvd.rank() == 0:
        callbacks.append(checkpoint("after"))  # reads the average over the ranks
    model.fit(
        training.train_dataset(
            shard(x_train), shard(y_train), args.batch_size, args.seed + hvd.rank()
        ),
        steps_per_epoch=training.steps_per_epoch(len(x_train), args.batch_size, hvd.size()),
        epochs=args.epochs,
        validation_data=(shard(x_test), shard(y_test)),
        callbacks=callbacks,
        verbose=0,
    )
    own_by_rank = hvd_tf.allgather_object(own)
    if hvd.rank() == 0:
        training.report(
            "checkpoint_order",
            {
                "workers": hvd.size(),
                "test_images_per_rank": [
                    len(data.shard(y_test, r, hvd.size())) for r in range(hvd.size())
                ],
                "val_loss_own": own_by_rank,
                "val_loss_averaged": averaged,
                "saved_before": saved_epochs(args.out, "before"),
                "saved_after": saved_epochs(args.out, "after"),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
