"""Horovod PyTorch MNIST trainer: ``train_torch_single.py`` plus the ``# Horovod:`` lines (lesson: PyTorch with Horovod, and DDP).

Run on 2 ranks with any of:
``horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.examples.train_torch_hvd``,
``mpirun -np 2 python -m hvdcourse.examples.train_torch_hvd``, or
``srun --mpi=pmix python -m hvdcourse.examples.train_torch_hvd``.
"""

from __future__ import annotations

import itertools
import sys


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``."""
    from hvdcourse.examples.cli import training_parser

    args = training_parser(
        "Train the course's MNIST CNN with PyTorch and Horovod on N workers.", live_metrics=True
    ).parse_args(argv)

    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import (
        DistributedSampler,
    )  # Horovod: a part of the data per rank

    import horovod.torch as hvd  # Horovod: the PyTorch flavour of the API

    from hvdcourse.examples import data, torch_model, torch_training, training
    from hvdcourse.runtime import devices

    hvd.init()  # Horovod: start the runtime; rank, size and local_rank are known from here on
    # Horovod: one GPU per process (the launcher's choice, else GPU local_rank), or the CPU
    device = devices.torch_device(hvd.local_rank(), hvd.local_size())
    # Horovod: share the node's cores
    threads = torch_training.set_threads(args.threads, hvd.local_size())
    # Horovod: ranks start from different weights; broadcast_parameters below makes them equal
    torch.manual_seed(args.seed + hvd.rank())

    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    train_set = TensorDataset(*torch_model.to_tensors(dataset.x_train, dataset.y_train))
    x_test, y_test = torch_model.to_tensors(
        data.shard(dataset.x_test, hvd.rank(), hvd.size()),  # Horovod: each rank tests its part,
        data.shard(dataset.y_test, hvd.rank(), hvd.size()),  # Horovod: the sums are added up below
    )
    sampler = DistributedSampler(  # Horovod: each rank trains on its own part, one order for all
        train_set,
        num_replicas=hvd.size(),
        rank=hvd.rank(),
        shuffle=True,
        seed=args.seed,
        drop_last=True,
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    steps = training.steps_per_epoch(len(train_set), args.batch_size, hvd.size(), args.max_steps)

    model = torch_model.build_model().to(device)
    # Horovod: the effective batch is N times larger; Adam's rate grows by sqrt(N)
    lr = training.scaled_lr(args.lr, hvd.size(), "adam")
    warmup_steps = int(args.warmup_epochs * steps)  # Horovod: ramp lr/N -> lr (Goyal 2017)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    optimizer = hvd.DistributedOptimizer(  # Horovod: average gradients with allreduce,
        optimizer,
        named_parameters=model.named_parameters(),  # Horovod: named in the timeline
    )
    loss_fn = torch_model.loss_fn()

    checkpoint = torch_training.TorchCheckpoint(args.checkpoint_dir, model, optimizer)
    # Horovod: rank 0 restores; the epoch (or rank 0's error) goes to every rank
    initial_epoch = training.restore_together(
        checkpoint, args.resume, hvd.rank(), hvd.broadcast_object
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Horovod: rank 0's weights to all
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)  # Horovod: and its optimizer state

    live = None
    if args.metrics_port is not None:  # live metrics for Prometheus (off by default)
        from hvdcourse.examples import live_metrics

        # Horovod: one port per rank of a node
        served = live_metrics.serve(args.metrics_port, hvd.rank(), hvd.local_rank())
        # Horovod: time each step's wait for the averaged gradients
        live = live_metrics.TorchSteps(served, args.batch_size, steps)
        callbacks = (*callbacks, live)

    if hvd.rank() == 0:  # Horovod: one header, not N
        print(
            f"[train_torch_hvd] data={dataset.source} ranks={hvd.size()} threads/rank={threads} "
            f"batch/rank={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    timer = torch_training.EpochTimer()
    for epoch in range(initial_epoch, args.epochs):
        sampler.set_epoch(epoch)  # Horovod: each epoch its own order, the same on every rank
        with timer.measure(images=steps * args.batch_size * hvd.size()):
            epoch_loss = 0.0
            for batch, (x, y) in enumerate(itertools.islice(loader, steps)):
                step = epoch * steps + batch
                torch_training.call_hooks(callbacks, "on_train_batch_begin", step, model, optimizer)
                torch_training.set_lr(
                    optimizer, torch_training.warmup_lr(lr, hvd.size(), step, warmup_steps)
                )
                optimizer.zero_grad()
                x, y = x.to(device), y.to(device)
                loss = loss_fn(model(x), y)
                loss.backward()  # Horovod: each gradient's allreduce starts as soon as it is ready
                if live is None:
                    optimizer.step()  # Horovod: waits for the averaged gradients, then updates
                else:
                    live.step(optimizer, loss)  # Horovod: the same, timing that wait
                epoch_loss += loss.item()
                torch_training.call_hooks(callbacks, "on_train_batch_end", step, model, optimizer)
        # Horovod: the loss averaged over ranks, not rank 0's alone
        epoch_loss = hvd.allreduce(torch.tensor(epoch_loss / steps), name="train_loss")
        if hvd.rank() == 0:  # Horovod: log and save on rank 0 only (others would corrupt the file)
            print(f"epoch {epoch + 1}/{args.epochs}: loss={float(epoch_loss):.4f}", flush=True)
            checkpoint.save(epoch + 1)

    metrics = torch_training.evaluate(
        model,
        x_test,
        y_test,
        # Horovod: every rank's sums added up: the metrics of the whole test set
        reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum),
    )
    metrics = torch_training.metrics_record(  # Horovod: the record names hvd.size() workers
        metrics, hvd.size(), model, lr=lr, steps_per_epoch=steps, **timer.summary()
    )
    print(
        f"[train_torch_hvd] rank={hvd.rank()} test_loss={metrics['loss']:.4f} "
        f"test_accuracy={metrics['accuracy']:.4f} weights_sha256={metrics['weights_sha256']}",
        flush=True,
    )
    if hvd.rank() == 0:  # Horovod: one metrics file
        training.write_metrics(args.metrics_json, metrics)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_main

    sys.exit(run_main(main))
