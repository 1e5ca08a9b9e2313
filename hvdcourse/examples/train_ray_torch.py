"""PyTorch MNIST trainer with Ray Train's ``TorchTrainer`` (lesson: Horovod and Ray Train, side by side).

``TorchTrainer`` starts N worker processes (Ray actors), joins them in a ``torch.distributed``
process group (Gloo on CPU, NCCL on GPUs) and runs :func:`train_loop` in each; the gradients are
averaged by PyTorch's own DistributedDataParallel, exactly as in ``train_torch_ddp.py``
(``ray.train.torch.prepare_model`` wraps the model in it). What Ray adds is around the loop:
starting the workers, collecting their per-epoch reports, keeping the checkpoints and restarting
the workers from the last one when one dies (``--max-failures``). Same model, data, per-worker
batch and learning-rate rule as ``train_torch_hvd.py``; lines that differ from
``train_torch_ddp.py``'s say ``# Ray:``.

Run on 2 workers on this machine (the script starts a private Ray instance and ends it)::

    python -m hvdcourse.examples.train_ray_torch --workers 2 --epochs 1
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import time

from hvdcourse.examples import data, ray_local, torch_model, torch_training, training
from hvdcourse.examples.cli import training_parser
from hvdcourse.runtime import results

RUN_PREFIX = "ray-torch"  # Ray: each run its own folder <checkpoint-dir>/ray-torch-<time>


def train_loop(config: dict) -> None:
    """What every Ray Train worker runs: ``train_torch_ddp.py``'s training with Ray's reports."""
    import argparse

    # Ray: the driver reports the run's metrics, not the workers.
    os.environ.pop(results.VARIABLE, None)
    args = argparse.Namespace(**config["args"])

    # The frameworks are imported here, in the worker: the driver needs none of them.
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    # DDP: Ray has joined the workers in a torch.distributed process group.
    import torch.distributed as dist

    # DDP: PyTorch's DistributedSampler gives each rank its own part of the data.
    from torch.utils.data.distributed import DistributedSampler

    # Ray: the workers' API (context, reports, checkpoints); ray.train.torch wraps the model in DDP.
    import ray.train
    import ray.train.torch
    from ray.train import Checkpoint

    context = ray.train.get_context()
    # Ray: which worker this is, of how many.
    rank, size = context.get_world_rank(), context.get_world_size()
    # Ray: the workers of a node share its cores.
    threads = torch_training.set_threads(args.threads, context.get_local_world_size())
    # DDP: ranks start from different weights; the wrapper gives every rank rank 0's weights.
    torch.manual_seed(args.seed + rank)

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
    steps = training.steps_per_epoch(len(train_set), args.batch_size, size, args.max_steps)

    model = torch_model.build_model(args.model)
    # DDP: the effective batch is N times larger, so the rate grows: for Adam, by sqrt(N).
    lr = training.scaled_lr(args.lr, size, "adam")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch_model.loss_fn()

    # Ray: the checkpoint to resume from: the last one reported before a restart (or --resume's).
    initial_epoch = 0
    resumed = ray.train.get_checkpoint()
    if resumed is not None:
        with resumed.as_directory() as folder:
            # DDP: every rank reads the same file, before the wrapper below copies rank 0's weights.
            initial_epoch = training.resume_from_checkpoint(
                torch_training.TorchCheckpoint(folder, model, optimizer), True
            )
    # Ray: DistributedDataParallel around the model, on the worker's device.
    ddp_model = ray.train.torch.prepare_model(model)
    device = ray.train.torch.get_device()
    save_dir = tempfile.mkdtemp(prefix=f"ray-torch-worker{rank}-")
    checkpoint = torch_training.TorchCheckpoint(save_dir, model, optimizer, keep=1)

    # DDP: over the first epochs the rate ramps from lr/N up to lr (Goyal et al. 2017).
    warmup = torch_training.LearningRateWarmup(lr, size, int(args.warmup_epochs * steps))
    # The callbacks and an epoch timer run inside zero_grad() and step(), so that the loop below
    # keeps PyTorch's four lines.
    optimizer = torch_training.CallbackOptimizer(
        optimizer,
        model,
        [*config["callbacks"], warmup],
        steps_per_epoch=steps,
        images_per_step=args.batch_size * size,
        first_step=initial_epoch * steps,
    )

    # Ray: one header from rank 0, not N.
    if rank == 0:
        print(
            f"[train_ray_torch] data={dataset.source} workers={size} threads/worker={threads} "
            f"batch/worker={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    started = time.time()
    for epoch in range(initial_epoch, args.epochs):
        # DDP: each epoch its own order, the same on every rank.
        sampler.set_epoch(epoch)
        epoch_loss = 0.0
        for x, y in itertools.islice(loader, steps):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            # DDP: the forward pass goes through the wrapper, not the model.
            loss = loss_fn(ddp_model(x), y)
            # DDP: the gradients are averaged during backward().
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        # DDP: the epoch's loss summed over the ranks, on the device (NCCL reduces GPU tensors).
        mean_loss = torch.tensor(epoch_loss / steps, device=device)
        dist.all_reduce(mean_loss)
        if rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}: loss={float(mean_loss) / size:.4f}", flush=True
            )
            checkpoint.save(epoch + 1)
        # Ray: every worker reports (a barrier); rank 0 hands over its checkpoint.
        ray.train.report(
            {
                "epoch": epoch + 1,
                "train_loss": float(mean_loss) / size,
                "start_epoch": initial_epoch,
                "time": time.time(),
            },
            checkpoint=Checkpoint.from_directory(save_dir) if rank == 0 else None,
        )

    def sum_over_ranks(tensor):
        # DDP: every rank's sums are added up: the loss and accuracy of the whole test set.
        dist.all_reduce(tensor)
        return tensor

    metrics = torch_training.evaluate(model, x_test, y_test, reduce_sum=sum_over_ranks)
    # DDP: every rank's weights digest, to tell the driver whether they are identical.
    digests = [None] * size
    dist.all_gather_object(digests, torch_model.weights_digest(model))
    metrics = torch_training.report_final_metrics(
        metrics,
        size,
        model,
        lr=lr,
        steps_per_epoch=steps,
        start_epoch=initial_epoch,
        identical_weights=len(set(digests)) == 1,
        **optimizer.timer.summary(),
    )
    # Every worker prints its result (the driver writes the metrics file).
    training.print_and_write("train_ray_torch", metrics, rank=rank)
    if rank == 0:
        checkpoint.save(args.epochs)
    # Ray: the final metrics travel with a last checkpoint (Ray keeps metrics with checkpoints).
    ray.train.report(
        {**metrics, "epoch": args.epochs, "final": True, "time": time.time(), "start": started},
        checkpoint=Checkpoint.from_directory(save_dir) if rank == 0 else None,
    )


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``,
    sent to every worker (they must pickle)."""
    parser = ray_local.add_ray_options(
        training_parser(
            "Train the course's MNIST CNN with Ray Train's TorchTrainer (DDP).", models=True
        )
    )
    args = parser.parse_args(argv)

    from ray.train import ScalingConfig  # Ray: how many workers, which resources
    from ray.train.torch import TorchTrainer  # Ray: joins the workers in a process group

    # Ray: a private local instance (or the cluster at --address), gone when the block ends
    with ray_local.session(num_cpus=args.cpus or args.workers, address=args.address):
        trainer = TorchTrainer(
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
        f"[train_ray_torch] workers={metrics['workers']} test_accuracy={metrics['accuracy']:.4f} "
        f"images/s={metrics['images_per_second']} train_seconds={metrics['train_seconds']}",
        flush=True,
    )
    training.write_metrics(args.metrics_json, metrics)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
