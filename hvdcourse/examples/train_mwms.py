"""MNIST trainer with TensorFlow's ``MultiWorkerMirroredStrategy`` (lessons: Measuring performance;
Beyond Horovod).

The peer a TensorFlow user would pick instead of Horovod: same model, data, per-worker batch and
learning-rate scaling as ``train_hvd.py``, but the workers find each other through ``TF_CONFIG``
(every worker's ``host:port`` and this worker's index) and average gradients with TensorFlow's own
gRPC collectives instead of MPI or Gloo. Lines that differ from ``train_single.py`` say ``# MWMS:``.

Run on 2 workers on this machine (two free ports are picked, the workers are started and stopped
through :func:`hvdcourse.runtime.launch.run_ranks`)::

    python -m hvdcourse.examples.train_mwms --workers 2 --epochs 1

Under a launcher that gives each process a rank (``mpirun``, ``srun``), list the workers yourself:
``mpirun -np 2 python -m hvdcourse.examples.train_mwms --cluster localhost:12345,localhost:12346``; or set
``TF_CONFIG`` in each process and run one process per worker.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile

from hvdcourse.runtime import results
from hvdcourse.runtime.errors import RunTimeout, UsageError
from hvdcourse.runtime.ranks import announced_rank


def free_ports(count: int, host: str = "localhost") -> list:
    """``count`` distinct TCP ports that are free right now on ``host`` (the OS picks them)."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # port 0: the kernel chooses a free port; keep it open until all are chosen
            sock.bind((host, 0))
            sockets.append(sock)
            ports.append(sock.getsockname()[1])
    finally:
        for sock in sockets:
            sock.close()
    return ports


def local_cluster(workers: int, host: str = "localhost") -> list:
    """``host:port`` addresses for ``workers`` workers on this machine."""
    return [f"{host}:{port}" for port in free_ports(workers, host)]


def tf_config(cluster: list, index: int) -> dict:
    """The ``TF_CONFIG`` of worker ``index`` in ``cluster`` (a list of ``host:port``)."""
    if not 0 <= index < len(cluster):
        raise ValueError(
            f"worker index {index} is outside 0..{len(cluster) - 1} for a cluster of {len(cluster)}"
        )
    return {"cluster": {"worker": list(cluster)}, "task": {"type": "worker", "index": index}}


def configure_worker(cluster_text: str | None, env=None) -> tuple:
    """Set ``TF_CONFIG`` from ``--cluster`` (index from the launcher's rank); return (index, cluster).

    With no ``--cluster``, an existing ``TF_CONFIG`` is used as is; with neither, one local worker.
    Must run before TensorFlow creates the strategy (it reads ``TF_CONFIG`` then).
    """
    env = os.environ if env is None else env
    if cluster_text:
        cluster = [addr.strip() for addr in cluster_text.split(",") if addr.strip()]
        rank = announced_rank(env)
        if rank is None:
            if len(cluster) > 1:
                raise UsageError(
                    "--cluster needs a launcher rank (mpirun, srun) to know which worker this "
                    "is; use --workers N to start N local workers instead"
                )
            rank = 0
        env["TF_CONFIG"] = json.dumps(tf_config(cluster, rank))
        return rank, cluster
    if env.get("TF_CONFIG"):
        config = json.loads(env["TF_CONFIG"])
        return int(config["task"]["index"]), list(config["cluster"]["worker"])
    return 0, ["localhost"]


def workers_on_this_host(cluster: list, index: int) -> int:
    """How many workers of ``cluster`` share the host of worker ``index`` (they share its cores)."""
    host = cluster[index].rsplit(":", 1)[0]
    return sum(1 for addr in cluster if addr.rsplit(":", 1)[0] == host)


def without_option(argv: list, option: str) -> list:
    """``argv`` with ``option VALUE`` (or ``option=VALUE``) removed."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def launch_local_workers(
    module: str,
    workers: int,
    argv: list,
    timeout: float = 600,
    env=None,
    cwd=None,
    echo: bool = False,
):
    """Start ``python -m module --cluster ... argv`` as ``workers`` local MWMS workers; return the RankRun.

    ``mpirun`` only starts the processes and gives each its rank: MWMS itself talks gRPC, not MPI.
    """
    from hvdcourse.runtime.launch import run_ranks

    program = [sys.executable, "-m", module, "--cluster", ",".join(local_cluster(workers)), *argv]
    return run_ranks(
        program, np=workers, launcher="mpirun", timeout=timeout, env=env, cwd=cwd, echo=echo
    )


def warmup_schedule(lr: float, workers: int, warmup_steps: int):
    """Linear warm-up from ``lr / workers`` to ``lr`` over ``warmup_steps`` (what Horovod's callback does)."""
    import tensorflow as tf

    class LinearWarmup(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            done = tf.minimum(tf.cast(step, tf.float32) / max(1, warmup_steps), 1.0)
            return lr / workers + (lr - lr / workers) * done

        def get_config(self):
            return {"lr": lr, "workers": workers, "warmup_steps": warmup_steps}

    return LinearWarmup() if warmup_steps > 0 and workers > 1 else lr


def distributed_train_dataset(strategy, x, y, batch_size: int, seed: int):
    """Each worker's own shard of (x, y), batched by ``batch_size`` per worker, for ``model.fit``."""
    import tensorflow as tf

    from hvdcourse.examples import data, training

    def dataset_fn(context: tf.distribute.InputContext):
        # MWMS: one input pipeline per worker, sharded by pipeline as Horovod shards by rank.
        part = context.input_pipeline_id
        xs = data.shard(x, part, context.num_input_pipelines)
        ys = data.shard(y, part, context.num_input_pipelines)
        return training.train_dataset(xs, ys, batch_size, seed + part)

    return strategy.distribute_datasets_from_function(dataset_fn)


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks (with ``--workers N``: passed to none, the workers are
    new processes)."""
    from hvdcourse.examples.cli import positive_int, training_parser

    parser = training_parser(
        "Train the course's MNIST CNN with MultiWorkerMirroredStrategy.", models=True
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="start this many workers on this machine (free ports are picked); default 1",
    )
    parser.add_argument(
        "--cluster",
        default=None,
        metavar="HOST:PORT,...",
        help="all workers' addresses; this worker's index is the launcher's rank (mpirun, srun)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_int,
        default=900,
        help="with --workers: stop all workers after this many seconds (default 900)",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.workers > 1 and not args.cluster and not os.environ.get("TF_CONFIG"):
        return run_local_workers(args, argv)

    # MWMS: TF_CONFIG (every worker's address, and this one's index) must exist before the strategy.
    index, cluster = configure_worker(args.cluster)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import tensorflow as tf

    from hvdcourse.examples import data, model as course_model, training

    workers = len(cluster)
    # MWMS: the workers of a host share its cores.
    threads = training.set_threads(args.threads, workers_on_this_host(cluster, index))
    # MWMS: connect to the other workers (this blocks until all of them are up).
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
    )
    # MWMS: the same initial weights everywhere (worker 0's are broadcast).
    tf.keras.utils.set_random_seed(args.seed)

    # MWMS: worker 0 alone says where the data comes from.
    dataset = data.load_mnist(args.data, download=args.download, quiet=index != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)
    # MWMS: N workers make one pass over the data in N times fewer steps.
    steps = training.steps_per_epoch(len(x_train), args.batch_size, workers, args.max_steps)

    # MWMS: variables created in the strategy's scope are mirrored on every worker.
    with strategy.scope():
        model = course_model.build_model(args.model)
        # MWMS: the effective batch is N times larger, so the rate grows: for Adam, by sqrt(N).
        lr = training.scaled_lr(args.lr, workers, "adam")
        optimizer = tf.keras.optimizers.Adam(
            learning_rate=warmup_schedule(lr, workers, int(args.warmup_epochs * steps))
        )
        model.compile(optimizer=optimizer, loss=course_model.loss_fn(), metrics=["accuracy"])

    # MWMS: every worker saves (saving is collective); only worker 0's folder is kept.
    checkpoint_dir = (
        args.checkpoint_dir if index == 0 else tempfile.mkdtemp(prefix=f"mwms-worker{index}-")
    )
    checkpoint = training.EpochCheckpoint(checkpoint_dir, model, optimizer)
    callbacks = [checkpoint.callback(), *callbacks]
    # MWMS: every worker restores worker 0's checkpoint itself (one file system): no broadcast.
    initial_epoch = training.resume_from_checkpoint(
        training.EpochCheckpoint(args.checkpoint_dir, model, optimizer), args.resume, index
    )
    # MWMS: worker 0 alone logs.
    verbose = 2 if index == 0 else 0
    if index == 0:
        print(
            f"[train_mwms] data={dataset.source} workers={workers} threads/worker={threads} "
            f"batch/worker={args.batch_size} lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
            flush=True,
        )
    try:
        model.fit(
            # MWMS: each worker its own part of every global batch (the strategy's input context).
            distributed_train_dataset(strategy, x_train, y_train, args.batch_size, args.seed),
            steps_per_epoch=steps,
            epochs=args.epochs,
            initial_epoch=initial_epoch,
            callbacks=callbacks,
            verbose=verbose,
        )
        # MWMS: the same weights everywhere: each worker evaluates the whole test set.
        metrics = training.evaluate(model, x_test, y_test)
    finally:
        if index != 0:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    # MWMS: every worker prints its result (equal digests: equal weights); worker 0 writes the file.
    return training.finish(
        "train_mwms", metrics, model, args.metrics_json, workers=workers, rank=index
    )


def run_local_workers(args, argv: list) -> int:
    """``--workers N``: start N workers of this script on this machine, hand their records on to
    whoever started this process, and return their exit status."""
    run = launch_local_workers(
        "hvdcourse.examples.train_mwms",
        args.workers,
        without_option(without_option(argv, "--workers"), "--timeout"),
        timeout=args.timeout,
        echo=True,
    )
    for records in run.results:
        for record in records or []:
            results.report(record)
    if run.timed_out:
        raise RunTimeout(
            f"the workers did not finish in {args.timeout} s and were stopped; "
            "raise --timeout or lower --epochs/--max-steps"
        )
    return run.returncode


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
