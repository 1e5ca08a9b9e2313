"""Training throughput (images/s) of the PyTorch runs (lessons: Measuring performance; PyTorch with
Horovod, and DDP).

The PyTorch twin of :mod:`hvdcourse.course.bench.throughput`, measuring the same thing: the same CNN
(:func:`hvdcourse.examples.torch_model.build_model`, the Keras model's layers), the course's MNIST held
in memory as a few cached batches cycled, the same per-rank batch, Adam at ``1e-3 x ranks``, one
training step = forward, loss, backward, update:

* ``--mode torch``: plain PyTorch in one process, no communication;
* ``--mode torch-hvd``: Horovod's ``DistributedOptimizer`` (start it with ``horovodrun`` or ``mpirun``);
* ``--mode ddp``: ``torch.distributed`` ``DistributedDataParallel`` over Gloo (start it with ``torchrun``).

How it is timed, as for Keras: ``--warmup-steps`` untimed steps (first allocations, Horovod's first
negotiations, DDP's first bucket rebuild), then ``--repeats`` repeats of ``--steps`` steps, each between
two barriers (an allreduce every rank must reach), so a repeat's time is that of the slowest rank.
images/s = steps x batch per rank x ranks / seconds; the median over repeats is the result. Rank 0
reports one result per batch size (:func:`hvdcourse.runtime.results.report`).

Example: ``torchrun --standalone --nproc-per-node 2 -m hvdcourse.course.bench.torch_throughput --mode ddp
--bind core``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from hvdcourse.course.bench.throughput import (
    batch_sizes,
    bind_to_core,
    knobs,
    local_rank,
    steps_for,
    timing_record,
)

MODES = ("torch", "torch-hvd", "ddp")


def parser() -> argparse.ArgumentParser:
    from hvdcourse.examples.cli import positive_int

    p = argparse.ArgumentParser(
        description="Images/s of the course's CNN in PyTorch under one configuration."
    )
    p.add_argument("--mode", choices=MODES, required=True)
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
        help="PyTorch intra-op threads per process (0: cores / processes; -1: PyTorch's default)",
    )
    p.add_argument(
        "--bind",
        choices=("none", "core"),
        default="none",
        help="core: pin this process to one core, chosen by its local rank",
    )
    p.add_argument(
        "--data",
        choices=("memory",),
        default="memory",
        help="memory: a few batches cached as tensors (the only data mode of the PyTorch runs)",
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
        help="Horovod: allreduce the gradients in this many groups (0: each on its own)",
    )
    p.add_argument("--label", default=None, help="name of this configuration in the results")
    return p


def memory_batches(x, y, batch_size: int, max_batches: int = 8) -> list:
    """Up to ``max_batches`` distinct (images, labels) batches as tensors, to be cycled: no shuffling,
    no I/O per step (:func:`hvdcourse.course.bench.throughput.memory_dataset`'s PyTorch twin)."""
    import numpy as np

    from hvdcourse.examples.torch_model import to_tensors

    count = max(1, min(max_batches, len(x) // batch_size))
    n = count * batch_size
    images, labels = to_tensors(np.resize(x, (n,) + x.shape[1:]), np.resize(y, (n,)))
    return list(zip(images.split(batch_size), labels.split(batch_size)))


class _Runtime:
    """What differs between the modes: rank, size, optimizer and model wrapping, barrier."""

    def __init__(self, mode: str):
        import torch

        self.mode, self.torch = mode, torch
        self.rank, self.size, self.local_size = 0, 1, 1
        if mode == "torch-hvd":
            import horovod.torch as hvd

            hvd.init()
            self.hvd = hvd
            self.rank, self.size, self.local_size = hvd.rank(), hvd.size(), hvd.local_size()
        elif mode == "ddp":
            import torch.distributed as dist

            dist.init_process_group("gloo")
            self.dist = dist
            self.rank, self.size = dist.get_rank(), dist.get_world_size()
            self.local_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.size))

    def barrier(self) -> None:
        zero = self.torch.zeros(1)
        if self.mode == "torch-hvd":
            self.hvd.allreduce(zero, name="bench_barrier")
        elif self.mode == "ddp":
            self.dist.all_reduce(zero)

    def wrap(self, model, lr: float, groups: int = 0):
        """(model to call, optimizer), each rank starting from rank 0's weights and state."""
        from hvdcourse.examples.training import scaled_lr

        optimizer = self.torch.optim.Adam(model.parameters(), lr=scaled_lr(lr, self.size, "adam"))
        if self.mode == "torch-hvd":
            # Horovod: groups=k allreduces the gradients in k groups; None (the CLI's 0) sets none
            optimizer = self.hvd.DistributedOptimizer(
                optimizer, named_parameters=model.named_parameters(), groups=groups or None
            )
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        elif self.mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model)  # broadcasts rank 0's weights
        return model, optimizer

    def close(self) -> None:
        if self.mode == "ddp":
            self.dist.destroy_process_group()


def measure(runtime: _Runtime, x, y, batch: int, args) -> dict:
    """Warm up, then time ``args.repeats`` repeats of ``args.steps`` steps between barriers."""
    import itertools

    from hvdcourse.examples import torch_model

    torch = runtime.torch
    torch.manual_seed(1234)
    batches = itertools.cycle(memory_batches(x, y, batch))
    model, optimizer = runtime.wrap(torch_model.build_model(), 1e-3, args.groups)
    loss_fn = torch_model.loss_fn()

    def train(steps: int) -> None:
        for images, labels in itertools.islice(batches, steps):
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()  # Horovod and DDP start their allreduces from here
            optimizer.step()

    train(args.warmup_steps)
    steps = steps_for(batch, args.steps, args.images_per_repeat)
    seconds = []
    for _ in range(args.repeats):
        runtime.barrier()  # every rank starts the clock together
        start = time.perf_counter()
        train(steps)
        runtime.barrier()  # ... and stops it when the slowest rank is done
        seconds.append(time.perf_counter() - start)
    return timing_record(seconds, steps, batch, runtime.size)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    from hvdcourse.runtime.machine import raise_priority

    priority = raise_priority()  # only if the suite asked for it ($HVDCOURSE_BENCH_NICE)
    # before any thread pool exists
    core = bind_to_core(local_rank()) if args.bind == "core" else None

    import torch

    from hvdcourse.examples import data, torch_training
    from hvdcourse.runtime import results

    runtime = _Runtime(args.mode)
    if args.threads >= 0:
        torch_training.set_threads(args.threads, runtime.local_size)
    intra = torch.get_num_threads()
    affinity = sorted(os.sched_getaffinity(0))
    print(
        f"[bench] rank={runtime.rank}/{runtime.size} mode={args.mode} threads={intra} "
        f"cpus={affinity}",
        flush=True,
    )

    dataset = data.load_mnist(quiet=True)
    x = data.shard(dataset.x_train, runtime.rank, runtime.size)
    y = data.shard(dataset.y_train, runtime.rank, runtime.size)
    for batch in args.batch_size:
        result = measure(runtime, x, y, batch, args)
        if runtime.rank == 0:
            cores = os.cpu_count() or 1
            result.update(
                {
                    "label": args.label,
                    "mode": args.mode,
                    "framework": "pytorch",
                    "torch": torch.__version__,
                    "ranks": runtime.size,
                    "intra_op_threads": intra,
                    "cores_used": min(cores, runtime.size * intra),
                    "threads_option": args.threads,
                    "bind": args.bind,
                    "core_of_rank0": core,
                    "cpus_of_rank0": affinity,
                    "data": args.data,
                    "warmup_steps": args.warmup_steps,
                    "repeats": args.repeats,
                    "priority": priority,
                    "groups": args.groups,
                    "knobs": knobs(),
                }
            )
            print(
                f"[bench] batch {batch} per rank: {result['median_images_per_s']:.0f} images/s "
                f"(median of {args.repeats} repeats)",
                flush=True,
            )
            results.report(result)
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
