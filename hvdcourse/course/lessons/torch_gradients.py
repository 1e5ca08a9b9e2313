"""Horovod's averaged PyTorch gradient is the full-batch gradient (lesson: PyTorch with Horovod, and DDP).

The PyTorch counterpart of :mod:`hvdcourse.course.lessons.gradients`, checked through Horovod itself: on N
ranks, each rank takes its equal shard of one batch, runs ``backward()`` under
``hvd.DistributedOptimizer`` and ``synchronize()``\\ s, so its ``.grad`` holds the allreduced average;
it also computes, alone, the gradient of the whole batch from the same weights. The two must agree
within float tolerance on every rank::

    mpirun -np 2 python -m hvdcourse.course.lessons.torch_gradients --batch 64
"""

from __future__ import annotations

import argparse
import sys

from hvdcourse.runtime.errors import UsageError, run_cli


def max_relative_difference(a: list, b: list) -> float:
    """max over tensors of ``|a - b|_max / (|b|_max + 1e-12)``."""
    return max(float((x - y).abs().max() / (y.abs().max() + 1e-12)) for x, y in zip(a, b))


def check(batch: int, seed: int = 0) -> dict:
    """Run the check on this rank (under a launcher); return and report what it found."""
    import torch

    import horovod.torch as hvd

    from hvdcourse.examples import data, torch_model
    from hvdcourse.examples.training import report

    hvd.init()
    if batch % hvd.size():
        raise UsageError(f"--batch {batch} does not split into {hvd.size()} equal shards")
    torch.manual_seed(seed)  # the same weights on every rank, without a broadcast
    model = torch_model.build_model()
    dataset = data.load_mnist(quiet=True)
    x, y = torch_model.to_tensors(dataset.x_train[:batch], dataset.y_train[:batch])
    loss_fn = torch_model.loss_fn()

    full = torch.autograd.grad(loss_fn(model(x), y), list(model.parameters()))

    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.0), named_parameters=model.named_parameters()
    )
    share = batch // hvd.size()
    mine = slice(hvd.rank() * share, (hvd.rank() + 1) * share)
    optimizer.zero_grad()
    loss_fn(model(x[mine]), y[mine]).backward()  # the hooks start the allreduces
    optimizer.synchronize()  # wait for them: each .grad is now the average over the ranks
    averaged = [p.grad.detach().clone() for p in model.parameters()]
    with optimizer.skip_synchronize():
        optimizer.step()  # (lr 0: nothing moves; a DistributedOptimizer expects its step)

    result = {
        "ranks": hvd.size(),
        "batch": batch,
        "relative_difference": max_relative_difference(averaged, list(full)),
        "own_shard_difference": max_relative_difference(
            list(torch.autograd.grad(loss_fn(model(x[mine]), y[mine]), list(model.parameters()))),
            list(full),
        ),
    }
    report("gradient_check", result)
    print(
        f"[torch_gradients] rank {hvd.rank()}: averaged vs full batch: "
        f"{result['relative_difference']:.2e}; own shard vs full batch: "
        f"{result['own_shard_difference']:.2e}",
        flush=True,
    )
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.lessons.torch_gradients",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--batch", type=int, default=64, help="global batch (default 64)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        raise UsageError("--batch must be a positive integer")
    check(args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
