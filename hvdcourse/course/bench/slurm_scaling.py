"""The ELKH Cloud talk's methodology on the local Slurm cluster (lesson: Measuring performance: going
further).

The talk ran the official TensorFlow benchmark scripts (tf_cnn_benchmarks) with ResNet models on 1-8
V100 nodes, at batch 32 (the scripts' default) and 196 (the largest that fitted) per GPU, and plotted
images/s and scaling efficiency. The suite's part ``slurm_scaling`` does the same, scaled down:
ResNet-20, the CIFAR-10 ResNet of He et al. (2016) that tf_cnn_benchmarks names ``resnet20``, on
synthetic CIFAR-shaped data (random 32x32x3 images made on each rank, as the scripts'
``--use_synthetic_data`` default: no input pipeline is timed), Horovod's ``DistributedGradientTape``,
one rank per node with one thread, at batch 32 and 196 per rank, on 1 and 2 nodes of the local Slurm
cluster (:class:`hvdcourse.course.services.slurm_cluster.LocalCluster`), each job submitted with
``sbatch --wait`` and started by ``srun --mpi=pmix``. As in the scripts, warm-up steps come first and
are not timed; then ``--repeats`` spans of ``--steps`` steps are timed between two allreduces (every
rank waits for the slowest) and images/s is the median. Scaling efficiency at N nodes = images/s at N
over N x images/s at 1 node, at the same batch.

What the two nodes share here: they are two ``slurmd`` daemons on one machine with ``CPUs=1`` each,
so the 2 ranks of a 2-node job share this machine's cores, memory and caches, and their "network" is
the loopback interface; the talk's nodes were separate virtual machines with a V100 each and a
10 Gbit/s network.

Rank side: ``python -m hvdcourse.course.bench.slurm_scaling rank --batch-size 32 ...`` (under srun).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time

from hvdcourse.runtime.errors import RunFailed, run_cli

BATCHES = (32, 196)  # the talk's default and maximum per GPU
NODES = (1, 2)
MARK = "[slurm_scaling] "  # rank 0's result line in the job's log


def resnet20(classes: int = 10):
    """ResNet-20 for 32x32x3 images (He et al. 2016, section 4.2): a 3x3 convolution of 16 filters,
    3 stages of 3 basic blocks (16, 32, 64 filters; the 2nd and 3rd stages start with stride 2 and a
    1x1 projection), global average pooling, ``classes`` logits."""
    import tensorflow as tf

    layers = tf.keras.layers

    def conv_bn(x, filters, stride=1, kernel=3, relu=True):
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU()(x) if relu else x

    inputs = layers.Input(shape=(32, 32, 3))
    x = conv_bn(inputs, 16)
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(3):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = conv_bn(x, filters, stride, 1, relu=False) if stride != 1 else x
            y = conv_bn(conv_bn(x, filters, stride), filters, relu=False)
            x = layers.ReLU()(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inputs, layers.Dense(classes)(x), name="resnet20")


def rank_main(argv) -> int:
    """One rank: time ResNet-20's training steps on synthetic data; rank 0 prints the result line."""
    parser = argparse.ArgumentParser(prog="python -m hvdcourse.course.bench.slurm_scaling rank")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import numpy as np
    import tensorflow as tf
    import horovod.tensorflow as hvd

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)  # the node's one CPU
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(hvd.rank())
    model = resnet20()
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size(), momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # synthetic CIFAR-shaped data, made once on each rank (no input pipeline is timed)
    images = tf.random.uniform((args.batch_size, 32, 32, 3))
    labels = tf.random.uniform((args.batch_size,), maxval=10, dtype=tf.int32)

    @tf.function
    def step(first: bool):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        if first:  # rank 0's weights and optimizer state to every rank
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables(), root_rank=0)
        return loss

    def barrier():
        hvd.allreduce(tf.constant(0.0), name="barrier").numpy()

    step(tf.constant(True))
    for _ in range(args.warmup_steps - 1):
        step(tf.constant(False))
    barrier()
    rates = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step(tf.constant(False))
        barrier()
        rates.append(args.steps * args.batch_size * hvd.size() / (time.perf_counter() - start))
    if hvd.rank() == 0:
        record = {
            "batch_per_rank": args.batch_size,
            "ranks": hvd.size(),
            "warmup_steps": args.warmup_steps,
            "steps": args.steps,
            "repeats": args.repeats,
            "images_per_s": [round(r, 2) for r in rates],
            "median_images_per_s": round(statistics.median(rates), 2),
            "final_loss": float(np.asarray(loss)),
            "parameters": int(model.count_params()),
        }
        print(MARK + json.dumps(record), flush=True)
    return 0


def job_record(output: str) -> dict | None:
    """Rank 0's result from a job's log, or None."""
    for line in output.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return None


def measure(
    batches=BATCHES, nodes=NODES, steps: int = 5, repeats: int = 3, timeout: float = 600, log=print
) -> dict:
    """Submit one job per (batch, nodes) to a fresh local Slurm cluster (stopped at the end); the
    part's document: rows with images/s, load and job time, and each row's scaling efficiency."""
    from hvdcourse.course.services.slurm_cluster import LocalCluster
    from hvdcourse.runtime import machine

    work = tempfile.mkdtemp(prefix="hvdcourse-slurm-scaling-")
    # a folder of its own: start() opens it to munged's socket, which a private parent would block
    cluster = LocalCluster(tempfile.mkdtemp(prefix="hvdcourse-slurm-", dir="/tmp"))
    rows = []
    try:
        cluster.start(timeout=120)
        for batch in batches:
            for n in nodes:
                rank = (
                    f"srun --mpi=pmix {sys.executable} -m {__name__} rank --batch-size {batch} "
                    f"--steps {steps} --repeats {repeats}"
                )
                load = machine.load_average()
                job = cluster.submit(
                    [
                        "sbatch",
                        "--wait",
                        "--parsable",
                        f"--nodes={n}",
                        "--ntasks-per-node=1",
                        "--cpus-per-task=1",
                        f"--output={work}/job-%j.log",
                        f"--wrap={rank}",
                    ],
                    cwd=work,
                    timeout=timeout,
                    env={"TF_CPP_MIN_LOG_LEVEL": "3"},
                )
                found = job_record(job.output)
                if job.state != "COMPLETED" or not found:
                    raise RunFailed(
                        f"the {n}-node job at batch {batch} ended {job.state} ({job.exit_code}) "
                        f"without a result; its log ends:\n{job.output[-1500:]}"
                    )
                row = {
                    **found,
                    "nodes": n,
                    "job_seconds": job.seconds,
                    "load_average_before": load,
                    "job_nodes": job.info.get("NodeList", ""),
                }
                rows.append(row)
                log(
                    f"  batch {batch:3d}, {n} node(s): {row['median_images_per_s']:8.1f} images/s "
                    f"(load {load[0]})"
                )
    finally:
        cluster.stop(quiet=True, remove=True)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "model": "resnet20",
        "data": "synthetic, 32x32x3",
        "shared": "node1 and node2 are two slurmd on this one machine (CPUs=1 each): a 2-node job's "
        "ranks share its cores, memory and caches, and talk over the loopback interface",
        "results": rows,
        "efficiency": efficiency(rows),
    }


def efficiency(rows: list) -> list:
    """Scaling efficiency of every row against the 1-node row at the same batch."""
    one = {r["batch_per_rank"]: r["median_images_per_s"] for r in rows if r["nodes"] == 1}
    return [
        {
            "batch_per_rank": r["batch_per_rank"],
            "nodes": r["nodes"],
            "images_per_s": r["median_images_per_s"],
            "efficiency": round(
                r["median_images_per_s"] / (r["nodes"] * one[r["batch_per_rank"]]), 3
            )
            if r["batch_per_rank"] in one
            else None,
        }
        for r in rows
    ]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rank"]:
        return rank_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.bench.slurm_scaling",
        description="ResNet-20 images/s at batch 32 and 196 on 1 and 2 nodes of the local Slurm "
        "cluster (the suite's part slurm_scaling: python -m hvdcourse.course.bench.suite --only "
        "slurm_scaling).",
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps(measure(steps=args.steps, repeats=args.repeats)["efficiency"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, stop_on_sigterm=True))
