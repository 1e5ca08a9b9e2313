"""PyTorch DistributedDataParallel MNIST trainer: the peer of ``train_torch_hvd.py`` without Horovod (lesson: PyTorch with Horovod, and DDP).

``train_torch_single.py`` plus the ``# DDP:`` lines: the same model, data, batch, learning-rate rule
and checkpoints; gradients are averaged by DDP's bucketed allreduce over Gloo. Run on 2 processes with
``torchrun --standalone --nproc-per-node 2 -m hvdcourse.examples.train_torch_ddp`` (torchrun puts
RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address into each process's environment).
"""

from __future__ import annotations

import itertools
import os
import sys

from hvdcourse.examples import data, torch_model, torch_training, training
from hvdcourse.examples.cli import training_parser
from hvdcourse.runtime import devices


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``."""
    args = training_parser(
        "Train the course's MNIST CNN with PyTorch DistributedDataParallel (launch with torchrun).",
        models=True,
    ).parse_args(argv)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    # DDP: PyTorch's own collectives.
    import torch.distributed as dist

    # DDP: the wrapper that averages the gradients of all ranks.
    from torch.nn.parallel import DistributedDataParallel

    # DDP: PyTorch's DistributedSampler gives each rank its own part of the data.
    from torch.utils.data.distributed import DistributedSampler

    gpu = torch.cuda.is_available()
    # DDP: join the group that torchrun announced (CPU: Gloo; GPU: NCCL).
    dist.init_process_group("nccl" if gpu else "gloo")
    # DDP: who am I, how many are we, and my place on this node (torchrun's environment).
    rank, size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    # DDP: one GPU per process (the launcher's choice, else GPU local_rank), or the CPU.
    device = devices.torch_device(local_rank, local_size)
    # DDP: the processes of a node share its cores.
    threads = torch_training.set_threads(args.threads, local_size)
    # DDP: ranks start from different weights; the wrapper below gives every rank rank 0's weights.
    torch.manual_seed(args.seed + rank)

    # DDP: rank 0 alone says where the data comes from.
    dataset = data.load_mnist(args.data, download=args.download, quiet=rank != 0)
    train_set = TensorDataset(*torch_model.to_tensors(dataset.x_train, dataset.y_train))
    # DDP: each rank tests on its own part; the sums of all ranks are added up at the end.
    x_test, y_test = torch_model.to_tensors(
        data.shard(dataset.x_test, rank, size), data.shard(dataset.y_test, rank, size)
    )
    # DDP: each rank trains on its own part of the data, shuffled in one order for all ranks.
    sampler = DistributedSampler(
        train_set, num_replicas=size, rank=rank, shuffle=True, seed=args.seed, drop_last=True
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    # DDP: N ranks make one pass over the data in N times fewer steps, the same number on each.
    steps = training.steps_per_epoch(len(train_set), args.batch_size, size, args.max_steps)

    model = torch_model.build_model(args.model).to(device)
    # DDP: the effective batch is N times larger, so the rate grows: for Adam, by sqrt(N).
    lr = training.scaled_lr(args.lr, size, "adam")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch_model.loss_fn()

    checkpoint = torch_training.TorchCheckpoint(args.checkpoint_dir, model, optimizer)
    # DDP: every rank reads the latest checkpoint (one file system): weights and optimizer state.
    initial_epoch = training.resume_from_checkpoint(checkpoint, args.resume)
    # DDP: the wrapper broadcasts rank 0's weights now, then averages the gradients in backward().
    ddp_model = DistributedDataParallel(model, device_ids=[device.index] if gpu else None)

    # DDP: over the first epochs the rate ramps from lr/N up to lr (Goyal et al. 2017).
    warmup = torch_training.LearningRateWarmup(lr, size, int(args.warmup_epochs * steps))
    # The callbacks and an epoch timer run inside zero_grad() and step(), so that the loop below
    # keeps PyTorch's four lines.
    optimizer = torch_training.CallbackOptimizer(
        optimizer,
        model,
        [*callbacks, warmup],
        steps_per_epoch=steps,
        # DDP: one step trains on N batches, one per rank.
        images_per_step=args.batch_size * size,
        first_step=initial_epoch * steps,
    )

    # DDP: one header from rank 0, not N.
    if rank == 0:
        print(
            f"[train_torch_ddp] data={dataset.source} ranks={size} threads/rank={threads} "
            f"batch/rank={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    for epoch in range(initial_epoch, args.epochs):
        # DDP: each epoch its own order, the same on every rank.
        sampler.set_epoch(epoch)
        epoch_loss = 0.0
        for x, y in itertools.islice(loader, steps):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            # DDP: the forward pass goes through the wrapper, not the model.
            loss = loss_fn(ddp_model(x), y)
            # DDP: a bucket's allreduce starts when its gradients are ready; all end in backward().
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        # DDP: the epoch's loss summed over the ranks, on the device (NCCL reduces GPU tensors).
        mean_loss = torch.tensor(epoch_loss / steps, device=device)
        dist.all_reduce(mean_loss)
        # DDP: rank 0 alone logs and saves (N processes writing one file would corrupt it).
        if rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}: loss={float(mean_loss) / size:.4f}", flush=True
            )
            checkpoint.save(epoch + 1)
        # DDP: no rank reads a checkpoint that rank 0 is still writing.
        dist.barrier()

    def sum_over_ranks(tensor):
        # DDP: every rank's sums are added up: the loss and accuracy of the whole test set.
        dist.all_reduce(tensor)
        return tensor

    metrics = torch_training.evaluate(model, x_test, y_test, reduce_sum=sum_over_ranks)
    # DDP: every rank prints its result (equal digests: equal weights); rank 0 writes the file.
    code = torch_training.finish(
        "train_torch_ddp",
        metrics,
        model,
        args.metrics_json,
        workers=size,
        rank=rank,
        lr=lr,
        steps_per_epoch=steps,
        **optimizer.timer.summary(),
    )
    # DDP: leave the group cleanly.
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
