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


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``."""
    from hvdcourse.examples.cli import training_parser

    args = training_parser(
        "Train the course's MNIST CNN with PyTorch DistributedDataParallel (launch with torchrun)."
    ).parse_args(argv)

    import torch
    import torch.distributed as dist  # DDP: PyTorch's own collectives
    from torch.nn.parallel import (
        DistributedDataParallel,
    )  # DDP: the wrapper that averages gradients
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler  # DDP: a part of the data per rank

    from hvdcourse.examples import data, torch_model, torch_training, training
    from hvdcourse.runtime import devices

    gpu = torch.cuda.is_available()
    # DDP: join the group torchrun announced (CPU: Gloo; GPU: NCCL)
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()  # DDP: who am I, how many are we
    local_rank = int(os.environ.get("LOCAL_RANK", 0))  # DDP: my place on this node
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))  # DDP: processes on this node
    # DDP: one GPU per process (the launcher's choice, else GPU local_rank), or the CPU
    device = devices.torch_device(local_rank, local_size)
    threads = torch_training.set_threads(args.threads, local_size)  # DDP: share the node's cores
    # DDP: ranks start from different weights; the wrapper below gives every rank rank 0's weights
    torch.manual_seed(args.seed + rank)

    dataset = data.load_mnist(args.data, download=args.download, quiet=rank != 0)
    train_set = TensorDataset(*torch_model.to_tensors(dataset.x_train, dataset.y_train))
    x_test, y_test = torch_model.to_tensors(
        data.shard(dataset.x_test, rank, size),  # DDP: each rank tests its part,
        data.shard(dataset.y_test, rank, size),  # DDP: the sums are added up below
    )
    sampler = DistributedSampler(  # DDP: each rank trains on its own part, one order for all
        train_set, num_replicas=size, rank=rank, shuffle=True, seed=args.seed, drop_last=True
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps = training.steps_per_epoch(len(train_set), args.batch_size, size, args.max_steps)

    model = torch_model.build_model().to(device)
    # DDP: the effective batch is N times larger; Adam's rate grows by sqrt(N)
    lr = training.scaled_lr(args.lr, size, "adam")
    warmup_steps = int(args.warmup_epochs * steps)  # DDP: ramp lr/N -> lr (Goyal 2017)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch_model.loss_fn()

    checkpoint = torch_training.TorchCheckpoint(args.checkpoint_dir, model, optimizer)
    # DDP: every rank reads rank 0's latest checkpoint (one file system), weights and optimizer state
    initial_epoch = training.resume_from_checkpoint(checkpoint, args.resume)
    # DDP: the wrapper broadcasts rank 0's weights now, then averages gradients in buckets in backward()
    ddp_model = DistributedDataParallel(  # DDP: wrap the model
        model, device_ids=[device.index] if gpu else None
    )

    if rank == 0:  # DDP: one header, not N
        print(
            f"[train_torch_ddp] data={dataset.source} ranks={size} threads/rank={threads} "
            f"batch/rank={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    timer = torch_training.EpochTimer()
    for epoch in range(initial_epoch, args.epochs):
        sampler.set_epoch(epoch)  # DDP: each epoch its own order, the same on every rank
        with timer.measure(images=steps * args.batch_size * size):
            epoch_loss = 0.0
            for batch, (x, y) in enumerate(itertools.islice(loader, steps)):
                step = epoch * steps + batch
                torch_training.call_hooks(callbacks, "on_train_batch_begin", step, model, optimizer)
                torch_training.set_lr(
                    optimizer, torch_training.warmup_lr(lr, size, step, warmup_steps)
                )
                optimizer.zero_grad()
                x, y = x.to(device), y.to(device)
                loss = loss_fn(ddp_model(x), y)  # DDP: forward through the wrapper, not model
                loss.backward()  # DDP: a bucket's allreduce starts when its gradients are ready
                optimizer.step()  # DDP: gradients are already averaged when backward() returns
                epoch_loss += loss.item()
                torch_training.call_hooks(callbacks, "on_train_batch_end", step, model, optimizer)
        # DDP: on the rank's device (NCCL reduces GPU tensors only)
        mean_loss = torch.tensor(epoch_loss / steps, device=device)
        dist.all_reduce(mean_loss)  # DDP: the loss summed over ranks, then divided below
        if rank == 0:  # DDP: log and save on rank 0 only (others would corrupt the file)
            print(
                f"epoch {epoch + 1}/{args.epochs}: loss={float(mean_loss) / size:.4f}", flush=True
            )
            checkpoint.save(epoch + 1)
        dist.barrier()  # DDP: no rank reads a checkpoint that rank 0 is still writing

    def sum_over_ranks(tensor):
        dist.all_reduce(tensor)  # DDP: every rank's sums added up
        return tensor

    metrics = torch_training.evaluate(model, x_test, y_test, reduce_sum=sum_over_ranks)
    metrics = torch_training.report_final_metrics(  # DDP: the record names size workers
        metrics, size, model, lr=lr, steps_per_epoch=steps, **timer.summary()
    )
    print(
        f"[train_torch_ddp] rank={rank} test_loss={metrics['loss']:.4f} "
        f"test_accuracy={metrics['accuracy']:.4f} weights_sha256={metrics['weights_sha256']}",
        flush=True,
    )
    if rank == 0:  # DDP: one metrics file
        training.write_metrics(args.metrics_json, metrics)
    dist.destroy_process_group()  # DDP: leave the group cleanly
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
