"""MNIST trainer with Ray Train's ``TensorflowTrainer`` (lesson: Horovod and Ray Train, side by side).

Ray Train does not average gradients itself: ``TensorflowTrainer`` starts N worker processes (Ray
actors), writes each one's ``TF_CONFIG`` and runs :func:`train_loop` in each, where TensorFlow's own
``MultiWorkerMirroredStrategy`` does the allreduce, exactly as in ``train_mwms.py``. What Ray adds is
around the loop: starting and placing the workers, collecting what they report each epoch
(``ray.train.report``), keeping the checkpoints, and restarting the workers from the last one when a
worker dies (``--max-failures``). Same model, data, per-worker batch and learning-rate rule as
``train_hvd.py``; lines that differ from ``train_mwms.py``'s say ``# Ray:``.

Run on 2 workers on this machine (the script starts a private Ray instance and ends it)::

    python -m hvdcourse.examples.train_ray_tf --workers 2 --epochs 1

On a running Ray cluster (a Slurm job that ran ``ray start`` on its nodes), add ``--address auto``
and give ``--checkpoint-dir`` a folder every node sees. The final record (test loss and accuracy,
``train_seconds``, ``images_per_second``, ``workers``) is reported by this driver process, once.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

# Ray: each run gets a folder <checkpoint-dir>/<RUN_PREFIX>-<time>; a run never reuses another's name
RUN_PREFIX = "ray-tf"


def train_loop(config: dict) -> None:
    """What every Ray Train worker runs: ``train_mwms.py``'s training with Ray's reports."""
    import argparse

    from hvdcourse.runtime import results

    # Ray: the driver reports the run's metrics, not the workers
    os.environ.pop(results.VARIABLE, None)
    args = argparse.Namespace(**config["args"])

    import tensorflow as tf
    import ray.train  # Ray: the workers' API (context, report, checkpoints)
    from ray.train import Checkpoint

    from hvdcourse.examples import data, model as course_model, training
    from hvdcourse.examples.train_mwms import distributed_train_dataset, warmup_schedule

    context = ray.train.get_context()
    # Ray: which worker, of how many
    index, workers = context.get_world_rank(), context.get_world_size()
    # Ray: share this node's cores
    threads = training.set_threads(args.threads, context.get_local_world_size())
    # MWMS: Ray has set TF_CONFIG; the strategy connects to the other workers
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
    )
    tf.keras.utils.set_random_seed(args.seed)  # MWMS: same initial weights everywhere

    dataset = data.load_mnist(args.data, download=args.download, quiet=index != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    steps = training.steps_per_epoch(len(x_train), args.batch_size, workers, args.max_steps)

    with strategy.scope():  # MWMS: variables created here are mirrored on every worker
        model = course_model.build_model(args.model)
        # MWMS: the effective batch is N times larger; Adam's rate grows by sqrt(N)
        lr = training.scaled_lr(args.lr, workers, "adam")
        optimizer = tf.keras.optimizers.Adam(
            learning_rate=warmup_schedule(lr, workers, int(args.warmup_epochs * steps))
        )
        model.compile(optimizer=optimizer, loss=course_model.loss_fn(), metrics=["accuracy"])
        optimizer.build(model.trainable_variables)

    # Ray: the checkpoint to resume from: the last one reported before a restart (or --resume's)
    initial_epoch = 0
    resumed = ray.train.get_checkpoint()
    if resumed is not None:
        with resumed.as_directory() as folder:
            # MWMS: every worker restores the same files itself: nothing to broadcast
            initial_epoch = training.resume_from_checkpoint(
                training.EpochCheckpoint(folder, model, optimizer), True, index
            )
    # MWMS: every worker saves (saving is collective); only worker 0's folder goes to Ray
    save_dir = tempfile.mkdtemp(prefix=f"ray-tf-worker{index}-")
    checkpoint = training.EpochCheckpoint(save_dir, model, optimizer, keep=1)
    started = time.time()

    class ReportEachEpoch(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            path = checkpoint.save(epoch + 1)
            metrics = {
                "epoch": epoch + 1,
                "train_loss": float(logs["loss"]),
                "start_epoch": initial_epoch,
                "time": time.time(),
            }
            # Ray: every worker reports (a barrier); worker 0 hands over its checkpoint
            ray.train.report(
                metrics,
                checkpoint=Checkpoint.from_directory(os.path.dirname(path)) if index == 0 else None,
            )

    timer = training.keras_epoch_timer(args.batch_size * workers)
    if index == 0:
        print(
            f"[train_ray_tf] data={dataset.source} workers={workers} threads/worker={threads} "
            f"batch/worker={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    model.fit(
        distributed_train_dataset(strategy, x_train, y_train, args.batch_size, args.seed),
        steps_per_epoch=steps,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        callbacks=[timer, ReportEachEpoch(), *config["callbacks"]],
        verbose=2 if index == 0 else 0,
    )
    # MWMS: same weights everywhere, whole test set
    metrics = training.evaluate(model, x_test, y_test)
    metrics = training.report_final_metrics(
        metrics,
        workers,
        model,
        lr=lr,
        steps_per_epoch=steps,
        start_epoch=initial_epoch,
        identical_weights=same_on_all_workers(strategy, model),
        **timer.timer.summary(),
    )
    # Every worker prints its result (the driver writes the metrics file).
    training.print_and_write("train_ray_tf", metrics, rank=index)
    # Ray: the final metrics travel with a last checkpoint (Ray keeps metrics with checkpoints)
    path = checkpoint.save(args.epochs)
    ray.train.report(
        {**metrics, "epoch": args.epochs, "final": True, "time": time.time(), "start": started},
        checkpoint=Checkpoint.from_directory(os.path.dirname(path)) if index == 0 else None,
    )


def same_on_all_workers(strategy, model) -> bool:
    """Whether every worker ends with the same weights: each worker's digest (its first 48 bits),
    gathered from all workers."""
    import tensorflow as tf

    from hvdcourse.examples.model import weights_digest

    mine = float(int(weights_digest(model)[:12], 16))  # exact in a float64
    # MWMS: an allgather over the workers
    every = strategy.gather(strategy.run(lambda: tf.constant([mine], tf.float64)), axis=0)
    return len(set(every.numpy().tolist())) == 1


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks, sent to every worker (they must pickle)."""
    from hvdcourse.examples import ray_local, training
    from hvdcourse.examples.cli import training_parser

    parser = ray_local.add_ray_options(
        training_parser(
            "Train the course's MNIST CNN with Ray Train's TensorflowTrainer (MWMS).", models=True
        )
    )
    args = parser.parse_args(argv)

    from ray.train import ScalingConfig  # Ray: how many workers, which resources
    from ray.train.tensorflow import TensorflowTrainer  # Ray: sets TF_CONFIG in every worker

    # Ray: a private local instance (or the cluster at --address), gone when the block ends
    with ray_local.session(num_cpus=args.cpus or args.workers, address=args.address):
        trainer = TensorflowTrainer(
            train_loop,  # Ray: runs in every worker
            train_loop_config={"args": vars(args), "callbacks": list(callbacks)},
            scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False),
            run_config=ray_local.run_config(args, RUN_PREFIX),
            # Ray: like the other trainers, resume from the newest checkpoint unless --no-resume
            resume_from_checkpoint=ray_local.latest_checkpoint(
                os.path.abspath(args.checkpoint_dir), RUN_PREFIX
            )
            if args.resume
            else None,
        )
        start = time.perf_counter()
        result = trainer.fit()  # Ray: blocks until the workers finish (or fail for good)
        metrics = ray_local.final_record(
            result, args.workers, time.perf_counter() - start, args.max_failures
        )
    training.report("final", metrics)  # the driver reports the run, once
    print(
        f"[train_ray_tf] workers={metrics['workers']} test_accuracy={metrics['accuracy']:.4f} "
        f"images/s={metrics['images_per_second']} train_seconds={metrics['train_seconds']}",
        flush=True,
    )
    training.write_metrics(args.metrics_json, metrics)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
