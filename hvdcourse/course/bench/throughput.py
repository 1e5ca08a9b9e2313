"""Training throughput (images/s) of one configuration (lesson: Measuring performance).

The same model (:func:`hvdcourse.examples.model.build_model`), data (the course's MNIST, in memory) and
per-rank batch for every mode, so that only the distribution differs:

* ``--mode keras``: plain Keras in one process, no Horovod;
* ``--mode hvd``: Horovod's ``DistributedOptimizer`` (start it with ``horovodrun`` or ``mpirun``);
* ``--mode mwms``: ``tf.distribute.MultiWorkerMirroredStrategy`` (``--cluster``, see ``train_mwms``);
* ``--mode solo``: every rank trains its own plain Keras model, no gradient averaging (an MPI barrier
  only starts and stops the clocks together; start it with ``mpirun``): what N processes can do on
  this machine without any communication, the ceiling of data parallelism here.

How it is timed: a warm-up ``fit`` (graph tracing, first allocations, Horovod's first negotiations)
is not timed; then ``--repeats`` epochs of ``--steps`` steps each are timed, each one between two
barriers (an allreduce that every rank must reach), so an epoch's time is that of the slowest rank.
images/s = steps x batch per rank x ranks / seconds; the median over repeats is the result.
Rank 0 reports one result per batch size, as it finishes it (:func:`hvdcourse.runtime.results.report`:
the caller of ``run_ranks`` finds them in ``RankRun.results[0]``).

Example: ``horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.course.bench.throughput --mode hvd
--threads 1 --bind core``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from hvdcourse.runtime.ranks import launcher_local_rank

MODES = ("keras", "hvd", "mwms", "solo")
KNOB_PREFIXES = (
    "HOROVOD_CYCLE_TIME",
    "HOROVOD_FUSION_THRESHOLD",
    "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_AUTOTUNE",
    "HOROVOD_CONTROLLER",
    "HOROVOD_CPU_OPERATIONS",
    "HOROVOD_THREAD_AFFINITY",
    "OMPI_MCA_mpi_yield",
    "OMPI_MCA_coll_tuned",
    "OMPI_MCA_btl",
    "TF_CPU_ALLOCATOR",
    "TF_ENABLE_ONEDNN",
    "MALLOC_",
    "OMP_",
    "GLIBC_TUNABLES",
)


def batch_sizes(text: str) -> list:
    sizes = [int(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"give positive batch sizes separated by commas, got {text!r}"
        )
    return sizes


def parser() -> argparse.ArgumentParser:
    from hvdcourse.examples.cli import positive_int

    p = argparse.ArgumentParser(description="Images/s of the course's CNN under one configuration.")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument(
        "--cluster",
        default=None,
        help="MWMS workers' host:port list (see hvdcourse.examples.train_mwms)",
    )
    p.add_argument(
        "--batch-size",
        type=batch_sizes,
        default=[64],
        help="batch size per rank; several (16,64) are measured one after another",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="TensorFlow intra-op threads per process (0: cores / processes; -1: TensorFlow's default)",
    )
    p.add_argument(
        "--inter-op",
        type=int,
        default=0,
        help="inter-op threads (0: what hvdcourse.examples.training.set_threads chooses)",
    )
    p.add_argument(
        "--bind",
        choices=("none", "core"),
        default="none",
        help="core: pin this process to one core, chosen by its local rank (like mpirun --bind-to core)",
    )
    p.add_argument(
        "--data",
        choices=("memory", "pipeline"),
        default="memory",
        help="memory: a few batches cached as tensors; pipeline: the trainers' shuffle/batch/prefetch",
    )
    p.add_argument("--warmup-steps", type=positive_int, default=10)
    p.add_argument("--steps", type=positive_int, default=40, help="steps per timed repeat")
    p.add_argument(
        "--images-per-repeat",
        type=positive_int,
        default=None,
        help="instead of --steps: about this many images per rank per repeat, whatever the batch",
    )
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument(
        "--groups",
        type=int,
        default=0,
        help="Horovod: allreduce the gradients in this many groups (1: one fused allreduce per step; "
        "0: each gradient on its own, fused only if ready in the same cycle)",
    )
    p.add_argument(
        "--fit-verbose", type=int, choices=(0, 1, 2), default=0, help="Keras verbose on rank 0"
    )
    p.add_argument(
        "--log-all-ranks", action="store_true", help="every rank logs (a classic mistake)"
    )
    p.add_argument("--label", default=None, help="name of this configuration in the results")
    return p


def local_rank(env=None) -> int:
    return launcher_local_rank(env)


def bind_to_core(rank: int) -> int:
    """Pin this process (and every thread it starts later) to one of its allowed cores, by local rank.

    Call it before TensorFlow or numpy start their thread pools: threads inherit the mask at birth.
    """
    cores = sorted(os.sched_getaffinity(0))
    core = cores[rank % len(cores)]
    os.sched_setaffinity(0, {core})
    return core


def knobs(env=None) -> dict:
    """The tuning variables set for this run (Horovod, OpenMPI, TensorFlow, malloc, OpenMP)."""
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith(KNOB_PREFIXES)}


def memory_dataset(x, y, batch_size: int, max_batches: int = 8):
    """Up to ``max_batches`` distinct batches held as tensors and cycled: no shuffling, no I/O per step."""
    import numpy as np
    import tensorflow as tf

    count = max(1, min(max_batches, len(x) // batch_size))
    n = count * batch_size
    xs = np.resize(x, (n,) + x.shape[1:]).reshape((count, batch_size) + x.shape[1:])
    ys = np.resize(y, (n,)).reshape(count, batch_size)
    return tf.data.Dataset.from_tensor_slices((xs, ys)).cache().repeat()


def steps_for(batch: int, steps: int, images_per_repeat: int | None = None, fewest: int = 5) -> int:
    """Steps per timed repeat: ``steps``, or enough for ``images_per_repeat`` images (at least ``fewest``)."""
    if images_per_repeat is None:
        return steps
    return max(fewest, round(images_per_repeat / batch))


def images_per_second(seconds: list, steps: int, batch: int, ranks: int) -> list:
    return [steps * batch * ranks / s for s in seconds]


def timing_record(seconds: list, steps: int, batch: int, ranks: int) -> dict:
    """One batch size's result: the repeats' seconds, their images/s and the median (both frameworks)."""
    rates = images_per_second(seconds, steps, batch, ranks)
    return {
        "batch_per_rank": batch,
        "global_batch": batch * ranks,
        "steps": steps,
        "seconds": seconds,
        "images_per_s": rates,
        "median_images_per_s": statistics.median(rates),
    }


class _Runtime:
    """What differs between the modes: rank, size, optimizer wrapping, barrier, dataset wrapping."""

    def __init__(self, mode: str, cluster_info: tuple = (0, ["localhost"])):
        import tensorflow as tf

        self.mode, self.tf = mode, tf
        self.rank, self.size, self.local_size = 0, 1, 1
        self.strategy = None
        if mode == "solo":
            from mpi4py import MPI

            self.comm = MPI.COMM_WORLD
            self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
            self.local_size = self.size
        elif mode == "hvd":
            import horovod.tensorflow as hvd_tf
            import horovod.tensorflow.keras as hvd

            hvd.init()
            self.hvd, self.hvd_tf = hvd, hvd_tf
            self.rank, self.size, self.local_size = hvd.rank(), hvd.size(), hvd.local_size()
        elif mode == "mwms":
            from hvdcourse.examples.train_mwms import workers_on_this_host

            self.rank, workers = cluster_info
            self.size, self.local_size = len(workers), workers_on_this_host(workers, self.rank)

    def make_strategy(self):
        tf = self.tf
        if self.mode == "mwms":
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=tf.distribute.experimental.CommunicationOptions(
                    implementation=tf.distribute.experimental.CommunicationImplementation.RING
                )
            )

            @tf.function
            def collective():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0))

            self._collective = collective

    def barrier(self) -> None:
        if self.mode == "solo":
            self.comm.Barrier()
        elif self.mode == "hvd":
            self.hvd_tf.allreduce(self.tf.constant(0.0), op=self.hvd_tf.Sum, name="bench_barrier")
        elif self.mode == "mwms":
            self.strategy.run(self._collective)

    def scope(self):
        import contextlib

        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def optimizer(self, lr: float, groups: int = 0):
        from hvdcourse.examples.training import scaled_lr

        opt = self.tf.keras.optimizers.Adam(learning_rate=scaled_lr(lr, self.size, "adam"))
        # Horovod: groups=k allreduces the gradients in k groups; None (the CLI's 0) sets no groups
        # (groups=0 raises ValueError; num_groups, deprecated since Horovod 0.21.3, took 0 for none)
        if self.mode != "hvd":
            return opt
        return self.hvd.DistributedOptimizer(opt, groups=groups or None)

    def dataset(self, ds):
        if self.mode == "mwms":
            return self.strategy.distribute_datasets_from_function(lambda context: ds)
        return ds

    def warmup_callbacks(self) -> list:
        return (
            [self.hvd.callbacks.BroadcastGlobalVariablesCallback(0)] if self.mode == "hvd" else []
        )


def measure(runtime: _Runtime, x, y, batch: int, args) -> dict:
    """Warm up, then time ``args.repeats`` epochs of ``args.steps`` steps between barriers."""
    tf = runtime.tf
    from hvdcourse.examples import model as course_model, training

    tf.keras.utils.set_random_seed(1234)
    if args.data == "memory":
        ds = memory_dataset(x, y, batch)
    else:
        ds = training.train_dataset(x, y, batch, seed=1234 + runtime.rank)
    with runtime.scope():
        model = course_model.build_model()
        model.compile(
            optimizer=runtime.optimizer(1e-3, args.groups),
            loss=course_model.loss_fn(),
            metrics=["accuracy"],
        )
    verbose = args.fit_verbose if (runtime.rank == 0 or args.log_all_ranks) else 0
    data = runtime.dataset(ds)
    model.fit(
        data,
        steps_per_epoch=args.warmup_steps,
        epochs=1,
        verbose=verbose,
        callbacks=runtime.warmup_callbacks(),
    )

    seconds = []

    class EpochTimer(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            runtime.barrier()  # every rank starts the clock together
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            runtime.barrier()  # ... and stops it when the slowest rank is done
            seconds.append(time.perf_counter() - self.start)

    steps = steps_for(batch, args.steps, args.images_per_repeat)
    model.fit(
        data, steps_per_epoch=steps, epochs=args.repeats, verbose=verbose, callbacks=[EpochTimer()]
    )
    return timing_record(seconds, steps, batch, runtime.size)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    from hvdcourse.runtime.machine import raise_priority

    priority = raise_priority()  # only if the suite asked for it ($HVDCOURSE_BENCH_NICE)
    # before any thread pool exists
    core = bind_to_core(local_rank()) if args.bind == "core" else None
    cluster_info = (0, ["localhost"])
    if args.mode == "mwms":
        from hvdcourse.examples.train_mwms import configure_worker

        cluster_info = configure_worker(args.cluster)  # sets TF_CONFIG before TensorFlow starts

    import tensorflow as tf

    from hvdcourse.examples import data, training
    from hvdcourse.runtime import results

    runtime = _Runtime(args.mode, cluster_info)
    threads_text = "TensorFlow default"
    if args.threads >= 0:
        threads_text = str(training.set_threads(args.threads, runtime.local_size))
        if args.inter_op > 0:
            tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    runtime.make_strategy()
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    affinity = sorted(os.sched_getaffinity(0))
    print(
        f"[bench] rank={runtime.rank}/{runtime.size} mode={args.mode} threads={threads_text} "
        f"(intra={intra} inter={inter}, 0 = TensorFlow chooses) cpus={affinity}",
        flush=True,
    )

    dataset = data.load_mnist(quiet=True)
    x, y = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x, y = data.shard(x, runtime.rank, runtime.size), data.shard(y, runtime.rank, runtime.size)
    for batch in args.batch_size:
        result = measure(runtime, x, y, batch, args)
        if runtime.rank == 0:
            cores = os.cpu_count() or 1
            result.update(
                {
                    "label": args.label,
                    "mode": args.mode,
                    "ranks": runtime.size,
                    "intra_op_threads": intra,
                    "cores_used": min(cores, runtime.size * (intra or cores)),
                    "inter_op_threads": inter,
                    "threads_option": args.threads,
                    "bind": args.bind,
                    "core_of_rank0": core,
                    "cpus_of_rank0": affinity,
                    "data": args.data,
                    "warmup_steps": args.warmup_steps,
                    "repeats": args.repeats,
                    "priority": priority,
                    "groups": args.groups,
                    "fit_verbose": args.fit_verbose,
                    "log_all_ranks": args.log_all_ranks,
                    "knobs": knobs(),
                }
            )
            print(
                f"[bench] batch {batch} per rank: {result['median_images_per_s']:.0f} images/s "
                # for a person; the caller gets:
                f"(median of {args.repeats} repeats)",
                flush=True,
            )
            results.report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
