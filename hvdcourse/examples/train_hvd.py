"""Horovod MNIST trainer: ``train_single.py`` plus the ``# Horovod:`` lines (lesson: Converting a Keras MNIST script to Horovod).

Run on 2 ranks with any of:
``horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.examples.train_hvd``,
``horovodrun -np 2 -H localhost:2 --mpi python -m hvdcourse.examples.train_hvd``,
``mpirun -np 2 python -m hvdcourse.examples.train_hvd``, or ``srun --mpi=pmix python -m hvdcourse.examples.train_hvd``.
"""

from __future__ import annotations

import sys

from hvdcourse.examples import data, live_metrics, training
from hvdcourse.examples.cli import training_parser
from hvdcourse.examples.model import build_model, loss_fn
from hvdcourse.runtime import devices


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks (e.g. a profiler, see :mod:`hvdcourse.course.lessons.timeline`)."""
    args = training_parser(
        "Train the course's MNIST CNN with Horovod on N workers.", live_metrics=True, models=True
    ).parse_args(argv)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import tensorflow as tf

    # Horovod: the Keras flavour of Horovod's API, and two collectives of its TensorFlow flavour.
    import horovod.tensorflow.keras as hvd
    from horovod.tensorflow import broadcast_object, broadcast_variables

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
    threads = training.set_threads(args.threads, hvd.local_size())
    # Horovod: each rank its own random seed (rank 0's weights are sent to every rank below).
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())

    # Horovod: rank 0 alone says where the data comes from.
    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    # Horovod: N ranks make one pass over the data in N times fewer steps, the same number on each.
    steps = training.steps_per_epoch(len(x_train), args.batch_size, hvd.size(), args.max_steps)
    # Horovod: each rank trains on its own part of the data, every N-th image.
    x_train = data.shard(x_train, hvd.rank(), hvd.size())
    y_train = data.shard(y_train, hvd.rank(), hvd.size())
    # Horovod: each rank also validates on its own part; MetricAverageCallback averages the results.
    x_test = data.shard(x_test, hvd.rank(), hvd.size())
    y_test = data.shard(y_test, hvd.rank(), hvd.size())

    model = build_model(args.model)
    # Horovod: the effective batch is N times larger, so the rate grows: for Adam, by sqrt(N).
    lr = training.scaled_lr(args.lr, hvd.size(), "adam")
    optimizer = tf.keras.optimizers.Adam(learning_rate=lr)
    # Horovod: the wrapped optimizer averages the gradients of all ranks with an allreduce.
    optimizer = hvd.DistributedOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss=loss_fn(), metrics=["accuracy"])
    # Horovod: create Adam's moments now, so that rank 0 can send them with its weights.
    optimizer.build(model.trainable_variables)
    if args.metrics_port is not None:
        # Horovod: each rank serves its live metrics for Prometheus, on port BASE + its local rank.
        serving = live_metrics.serve_for_keras(
            optimizer, args.metrics_port, hvd.rank(), hvd.local_rank(), args.batch_size
        )
        callbacks = (*callbacks, serving)

    callbacks = [
        # Horovod: after the first batch, rank 0's weights and optimizer state go to every rank.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: at each epoch's end, every metric (validation too) is averaged over the ranks.
        hvd.callbacks.MetricAverageCallback(),
        *callbacks,
    ]
    if args.warmup_epochs > 0:
        # Horovod: over the first epochs the rate ramps from lr/N up to lr (Goyal et al. 2017).
        warmup = hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=lr,
            warmup_epochs=args.warmup_epochs,
            steps_per_epoch=steps,
            verbose=1 if hvd.rank() == 0 else 0,
        )
        callbacks.append(warmup)
    checkpoint = training.EpochCheckpoint(args.checkpoint_dir, model, optimizer)
    # Horovod: rank 0 alone writes checkpoints; N processes writing one file would corrupt it.
    if hvd.rank() == 0:
        callbacks.append(checkpoint.callback())
    # Horovod: rank 0 reads the latest checkpoint and sends its epoch, weights and optimizer state
    # to every rank before the first step.
    initial_epoch = training.resume_from_checkpoint(
        checkpoint, args.resume, hvd.rank(), broadcast_object, broadcast_variables
    )
    # Horovod: Keras logs the epochs on rank 0 only.
    verbose = 2 if hvd.rank() == 0 else 0

    # Horovod: one header from rank 0, not N.
    if hvd.rank() == 0:
        print(
            f"[train_hvd] data={dataset.source} ranks={hvd.size()} threads/rank={threads} "
            f"batch/rank={args.batch_size} lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
            flush=True,
        )
    # Horovod: each rank's batches from its own part, in its own order, from the first one not yet
    # trained on (all of them, unless the run resumes).
    batches = training.train_dataset(
        x_train, y_train, args.batch_size, args.seed + hvd.rank(), start_step=initial_epoch * steps
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

    # Horovod: every rank's sums are added up: the loss and accuracy of the whole test set.
    metrics = training.evaluate(
        model, x_test, y_test, reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum)
    )
    # Horovod: every rank prints its result (equal digests: equal weights); rank 0 writes the file.
    return training.finish(
        "train_hvd",
        metrics,
        model,
        args.metrics_json,
        workers=hvd.size(),
        rank=hvd.rank(),
        lr=lr,
        steps_per_epoch=steps,
    )


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
