"""Horovod PyTorch MNIST trainer: ``train_torch_single.py`` plus the ``# Horovod:`` lines (lesson: PyTorch with Horovod, and DDP).

Run on 2 ranks with any of:
``horovodrun -np 2 -H localhost:2 --gloo python -m hvdcourse.examples.train_torch_hvd``,
``mpirun -np 2 python -m hvdcourse.examples.train_torch_hvd``, or
``srun --mpi=pmix python -m hvdcourse.examples.train_torch_hvd``.
"""

from __future__ import annotations

import itertools
import sys

from hvdcourse.examples import data, live_metrics, torch_model, torch_training, training
from hvdcourse.examples.cli import training_parser
from hvdcourse.runtime import devices


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``."""
    args = training_parser(
        "Train the course's MNIST CNN with PyTorch and Horovod on N workers.",
        live_metrics=True,
        models=True,
    ).parse_args(argv)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    # Horovod: PyTorch's DistributedSampler gives each rank its own part of the data.
    from torch.utils.data.distributed import DistributedSampler

    # Horovod: the PyTorch flavour of Horovod's API.
    import horovod.torch as hvd

    # Horovod: start the runtime; rank, size and local_rank are known from here on.
    hvd.init()
    # Horovod: one GPU per process (the launcher's choice, else GPU local_rank), or the CPU.
    device = devices.torch_device(hvd.local_rank(), hvd.local_size())
    # Horovod: the processes of a node share its cores.
    threads = torch_training.set_threads(args.threads, hvd.local_size())
    # Horovod: ranks start from different weights; broadcast_parameters below makes them equal.
    torch.manual_seed(args.seed + hvd.rank())

    # Horovod: rank 0 alone says where the data comes from.
    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    train_set = TensorDataset(*torch_model.to_tensors(dataset.x_train, dataset.y_train))
    # Horovod: each rank tests on its own part; the sums of all ranks are added up at the end.
    x_test, y_test = torch_model.to_tensors(
        data.shard(dataset.x_test, hvd.rank(), hvd.size()),
        data.shard(dataset.y_test, hvd.rank(), hvd.size()),
    )
    # Horovod: each rank trains on its own part of the data, shuffled in one order for all ranks.
    sampler = DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed, drop_last=True
    )
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    # Horovod: N ranks make one pass over the data in N times fewer steps, the same number on each.
    steps = training.steps_per_epoch(len(train_set), args.batch_size, hvd.size(), args.max_steps)

    model = torch_model.build_model(args.model).to(device)
    # Horovod: the effective batch is N times larger, so the rate grows: for Adam, by sqrt(N).
    lr = training.scaled_lr(args.lr, hvd.size(), "adam")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    # Horovod: the wrapped optimizer averages the gradients of all ranks with allreduces, named
    # after the parameters in the timeline.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss_fn = torch_model.loss_fn()

    checkpoint = torch_training.TorchCheckpoint(args.checkpoint_dir, model, optimizer)
    # Horovod: rank 0 reads the latest checkpoint and sends its epoch to every rank.
    initial_epoch = training.resume_from_checkpoint(
        checkpoint, args.resume, hvd.rank(), hvd.broadcast_object
    )
    # Horovod: rank 0's weights go to every rank, so that all ranks start from the same model.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # Horovod: rank 0's optimizer state too (Adam's moments and step count, once restored).
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    if args.metrics_port is not None:
        # Horovod: each rank serves its live metrics for Prometheus, on port BASE + its local rank.
        serving = live_metrics.serve_for_torch(
            optimizer,
            loss_fn,
            args.metrics_port,
            hvd.rank(),
            hvd.local_rank(),
            args.batch_size,
            steps,
        )
        callbacks = (*callbacks, serving)
    # Horovod: over the first epochs the rate ramps from lr/N up to lr (Goyal et al. 2017).
    warmup = torch_training.LearningRateWarmup(lr, hvd.size(), int(args.warmup_epochs * steps))
    # The callbacks and an epoch timer run inside zero_grad() and step(), so that the loop below
    # keeps PyTorch's four lines.
    optimizer = torch_training.CallbackOptimizer(
        optimizer,
        model,
        [*callbacks, warmup],
        steps_per_epoch=steps,
        # Horovod: one step trains on N batches, one per rank.
        images_per_step=args.batch_size * hvd.size(),
        first_step=initial_epoch * steps,
    )

    # Horovod: one header from rank 0, not N.
    if hvd.rank() == 0:
        print(
            f"[train_torch_hvd] data={dataset.source} ranks={hvd.size()} threads/rank={threads} "
            f"batch/rank={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    for epoch in range(initial_epoch, args.epochs):
        # Horovod: each epoch its own order, the same on every rank.
        sampler.set_epoch(epoch)
        epoch_loss = 0.0
        for x, y in itertools.islice(loader, steps):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            # Horovod: each gradient's allreduce starts as soon as backward() has computed it.
            loss.backward()
            # Horovod: step() waits for the averaged gradients, then updates the weights.
            optimizer.step()
            epoch_loss += loss.item()
        # Horovod: the epoch's loss averaged over the ranks, not rank 0's alone.
        epoch_loss = hvd.allreduce(torch.tensor(epoch_loss / steps), name="train_loss")
        # Horovod: rank 0 alone logs and saves (N processes writing one file would corrupt it).
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss={float(epoch_loss):.4f}", flush=True)
            checkpoint.save(epoch + 1)

    # Horovod: every rank's sums are added up: the loss and accuracy of the whole test set.
    metrics = torch_training.evaluate(
        model, x_test, y_test, reduce_sum=lambda t: hvd.allreduce(t, op=hvd.Sum)
    )
    # Horovod: every rank prints its result (equal digests: equal weights); rank 0 writes the file.
    return torch_training.finish(
        "train_torch_hvd",
        metrics,
        model,
        args.metrics_json,
        workers=hvd.size(),
        rank=hvd.rank(),
        lr=lr,
        steps_per_epoch=steps,
        **optimizer.timer.summary(),
    )


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
