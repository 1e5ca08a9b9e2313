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

RUN_PREFIX = "ray-torch"  # Ray: each run its own folder <checkpoint-dir>/ray-torch-<time>


def train_loop(config: dict) -> None:
    """What every Ray Train worker runs: ``train_torch_ddp.py``'s training with Ray's reports."""
    import argparse

    from hvdcourse.runtime import results

    os.environ.pop(
        results.VARIABLE, None
    )  # Ray: the driver reports the run's metrics, not the workers
    args = argparse.Namespace(**config["args"])
    callbacks = config["callbacks"]

    import torch
    import torch.distributed as dist  # DDP: Ray has joined the workers in a process group
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    import ray.train  # Ray: the workers' API (context, report, checkpoints)
    import ray.train.torch  # Ray: prepare_model wraps DDP
    from ray.train import Checkpoint

    from hvdcourse.examples import data, torch_model, torch_training, training

    context = ray.train.get_context()
    rank, size = (
        context.get_world_rank(),
        context.get_world_size(),
    )  # Ray: which worker, of how many
    # Ray: share this node's cores
    threads = torch_training.set_threads(args.threads, context.get_local_world_size())
    torch.manual_seed(args.seed + rank)  # DDP: the wrapper gives every rank rank 0's weights

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

    model = torch_model.build_model()
    # DDP: the effective batch is N times larger; Adam's rate grows by sqrt(N)
    lr = training.scaled_lr(args.lr, size, "adam")
    warmup_steps = int(args.warmup_epochs * steps)  # DDP: ramp lr/N -> lr (Goyal 2017)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch_model.loss_fn()

    # Ray: the checkpoint to resume from: the last one reported before a restart (or --resume's)
    initial_epoch = 0
    resumed = ray.train.get_checkpoint()
    if resumed is not None:
        with resumed.as_directory() as folder:
            # DDP: every rank reads the same file, before the wrapper below copies rank 0's weights
            initial_epoch = training.resume_from_checkpoint(
                torch_training.TorchCheckpoint(folder, model, optimizer), True
            )
    # Ray: DistributedDataParallel around the model, on the worker's device
    ddp_model = ray.train.torch.prepare_model(model)
    device = ray.train.torch.get_device()
    save_dir = tempfile.mkdtemp(prefix=f"ray-torch-worker{rank}-")
    checkpoint = torch_training.TorchCheckpoint(save_dir, model, optimizer, keep=1)

    if rank == 0:
        print(
            f"[train_ray_torch] data={dataset.source} workers={size} threads/worker={threads} "
            f"batch/worker={args.batch_size} lr={lr:g} steps/epoch={steps} "
            f"start_epoch={initial_epoch}",
            flush=True,
        )
    started = time.time()
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
                loss.backward()  # DDP: the gradients are averaged during backward()
                optimizer.step()
                epoch_loss += loss.item()
                torch_training.call_hooks(callbacks, "on_train_batch_end", step, model, optimizer)
        # DDP: on the worker's device (NCCL reduces GPU tensors only)
        mean_loss = torch.tensor(epoch_loss / steps, device=device)
        dist.all_reduce(mean_loss)  # DDP: the loss summed over ranks, then divided below
        if rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs}: loss={float(mean_loss) / size:.4f}", flush=True
            )
            checkpoint.save(epoch + 1)
        # Ray: every worker reports (a barrier); rank 0 hands over its checkpoint
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
        dist.all_reduce(tensor)  # DDP: every rank's sums added up
        return tensor

    metrics = torch_training.evaluate(model, x_test, y_test, reduce_sum=sum_over_ranks)
    digests = [None] * size
    dist.all_gather_object(digests, torch_model.weights_digest(model))  # DDP: every rank's weights
    metrics = torch_training.report_final_metrics(
        metrics,
        size,
        model,
        lr=lr,
        steps_per_epoch=steps,
        start_epoch=initial_epoch,
        identical_weights=len(set(digests)) == 1,
        **timer.summary(),
    )
    print(
        f"[train_ray_torch] rank={rank} test_loss={metrics['loss']:.4f} "
        f"test_accuracy={metrics['accuracy']:.4f} weights_sha256={metrics['weights_sha256']}",
        flush=True,
    )
    if rank == 0:
        checkpoint.save(args.epochs)
    # Ray: the final metrics travel with a last checkpoint (Ray keeps metrics with checkpoints)
    ray.train.report(
        {**metrics, "epoch": args.epochs, "final": True, "time": time.time(), "start": started},
        checkpoint=Checkpoint.from_directory(save_dir) if rank == 0 else None,
    )


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``,
    sent to every worker (they must pickle)."""
    from hvdcourse.examples import ray_local, training
    from hvdcourse.examples.cli import training_parser

    parser = ray_local.add_ray_options(
        training_parser("Train the course's MNIST CNN with Ray Train's TorchTrainer (DDP).")
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
