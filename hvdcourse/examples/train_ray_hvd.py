"""Horovod on Ray: ``train_hvd.py`` unchanged, its workers started by Ray Train's ``HorovodTrainer``
(lesson: Horovod and Ray Train, side by side).

``mpirun``, ``horovodrun`` and ``srun`` start N copies of ``train_hvd.py`` and tell each its rank.
``HorovodTrainer`` does the same job with Ray: it starts N Ray workers, sets up Horovod's Gloo
rendezvous between them (the environment ``horovodrun --gloo`` would set) and calls
:func:`train_loop` in each, which calls ``train_hvd.main``: ``hvd.init()`` there finds its rank
and size, and the allreduce is Horovod's, exactly as under ``mpirun``. Ray adds what it adds to
every trainer: placing the workers, collecting a report per epoch, restarting the workers when one
dies (``--max-failures``; ``train_hvd`` then resumes from rank 0's checkpoint, as after any restart).

Ray 2.60 keeps ``HorovodTrainer`` only in its first Train API (V1, "beta"): ``RAY_TRAIN_V2_ENABLED=0``
selects it (this script sets it), and creating one under the default V2 API raises an error.
On 2 CPUs the trainer's own actor must reserve none (``trainer_resources={"CPU": 0}``), or V1
waits for a third CPU forever. Run on 2 workers on this machine::

    python -m hvdcourse.examples.train_ray_hvd --workers 2 --epochs 1

Every ``train_hvd.py`` option works (``--batch-size``, ``--max-steps``, ``--checkpoint-dir``...);
``--address auto`` joins a running Ray cluster instead of starting one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

# Ray: HorovodTrainer exists only in Ray Train's first API (V1); read when ray.train is imported
V1 = {"RAY_TRAIN_V2_ENABLED": "0"}


def train_loop(config: dict) -> None:
    """What every Ray worker runs: ``train_hvd.main`` with a callback that reports each epoch to Ray."""
    import ray.train
    import tensorflow as tf

    from hvdcourse.examples import train_hvd
    from hvdcourse.runtime import results

    # Ray: the driver reports the run's metrics, not the workers
    os.environ.pop(results.VARIABLE, None)

    class ReportEachEpoch(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            # Ray: every worker reports, at the same points (a barrier in Ray Train V1)
            ray.train.report({"epoch": epoch + 1, "train_loss": float(logs["loss"])})

    # Horovod: hvd.init() inside reads the rank, size and Gloo rendezvous that HorovodTrainer set
    train_hvd.main(config["argv"], callbacks=[ReportEachEpoch(), *config["callbacks"]])
    metrics = {}
    if ray.train.get_context().get_world_rank() == 0:  # rank 0 wrote the run's metrics
        with open(config["metrics_json"]) as fh:
            metrics = json.load(fh)
    ray.train.report({**metrics, "final": True})


def parser() -> argparse.ArgumentParser:
    """``train_hvd.py``'s options plus the Ray ones (``--workers --cpus --max-failures --address --run-name``)."""
    from hvdcourse.examples import ray_local
    from hvdcourse.examples.cli import training_parser

    return ray_local.add_ray_options(
        training_parser(
            "Train the course's MNIST CNN with train_hvd.py on Ray workers (Ray Train's HorovodTrainer)."
        )
    )


def worker_argv(argv: list, args, metrics_json: str) -> list:
    """``train_hvd.py``'s arguments for the workers: ``argv`` less the Ray options, with absolute
    paths (Ray runs the workers in a folder of its own) and rank 0's metrics file."""
    from hvdcourse.examples import ray_local

    ray_only = ray_local.add_ray_options(argparse.ArgumentParser(add_help=False))
    _, rest = ray_only.parse_known_args(argv)
    absolute = ["--checkpoint-dir", os.path.abspath(args.checkpoint_dir)]
    if args.data:
        absolute += ["--data", os.path.abspath(args.data)]
    return [*rest, *absolute, "--metrics-json", metrics_json]  # later options win in argparse


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks, sent to every worker (they must pickle)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)  # errors and --help here, before Ray starts
    for name, value in V1.items():
        os.environ[name] = value  # Ray: before the first import of ray.train

    from ray.train import ScalingConfig  # Ray: how many workers, which resources
    from ray.train.horovod import HorovodTrainer  # Ray: Horovod's Gloo rendezvous in every worker

    from hvdcourse.examples import ray_local, training

    metrics_json = os.path.join(tempfile.mkdtemp(prefix="ray-hvd-"), "metrics.json")
    # Ray: a private local instance (or the cluster at --address), gone when the block ends
    with ray_local.session(num_cpus=args.cpus or args.workers, address=args.address):
        trainer = HorovodTrainer(
            train_loop,  # Ray: runs in every worker
            train_loop_config={
                "argv": worker_argv(argv, args, metrics_json),
                "metrics_json": metrics_json,
                "callbacks": list(callbacks),
            },
            # Ray: the trainer's own actor reserves no CPU, else V1 waits for workers + 1 CPUs
            scaling_config=ScalingConfig(
                num_workers=args.workers, use_gpu=False, trainer_resources={"CPU": 0}
            ),
            run_config=ray_local.run_config(args, "ray-hvd"),
        )
        start = time.perf_counter()
        result = trainer.fit()  # Ray: blocks until the workers finish (or fail for good)
        seconds = time.perf_counter() - start
        if result.error is not None or not (result.metrics or {}).get("final"):
            from hvdcourse.runtime.errors import RunFailed

            raise RunFailed(
                f"HorovodTrainer ended without final metrics ({result.error or 'no final report'}); "
                "see the workers' lines above"
            )
        metrics = {k: v for k, v in result.metrics.items() if k in FINAL_KEYS}
    metrics.update(wall_seconds=round(seconds, 2), max_failures=args.max_failures)
    training.report("final", metrics)  # the driver reports the run, once
    print(
        f"[train_ray_hvd] workers={metrics['workers']} test_accuracy={metrics['accuracy']:.4f} "
        f"weights_sha256={metrics['weights_sha256']} wall_seconds={metrics['wall_seconds']}",
        flush=True,
    )
    training.write_metrics(args.metrics_json, metrics)
    return 0


# what rank 0's train_hvd metrics hold that the driver passes on
FINAL_KEYS = ("loss", "accuracy", "examples", "workers", "weights_sha256", "lr", "steps_per_epoch")


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
