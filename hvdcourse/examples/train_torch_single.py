"""Single-process PyTorch MNIST trainer: the starting point of the PyTorch conversion (lesson: PyTorch with Horovod, and DDP).

Run: ``python -m hvdcourse.examples.train_torch_single --epochs 3``. Its Horovod twin,
``train_torch_hvd.py``, has the same lines in the same order plus the ``# Horovod:`` ones; the
model and data are those of the Keras scripts.
"""

from __future__ import annotations

import itertools
import sys


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``."""
    from hvdcourse.examples.cli import training_parser

    args = training_parser("Train the course's MNIST CNN with PyTorch on one process.").parse_args(
        argv
    )

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from hvdcourse.examples import data, torch_model, torch_training, training

    threads = torch_training.set_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)

    dataset = data.load_mnist(args.data, download=args.download)
    train_set = TensorDataset(*torch_model.to_tensors(dataset.x_train, dataset.y_train))
    x_test, y_test = torch_model.to_tensors(dataset.x_test, dataset.y_test)
    shuffle = torch.Generator()
    loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, generator=shuffle, drop_last=True
    )
    steps = training.steps_per_epoch(len(train_set), args.batch_size, 1, args.max_steps)

    model = torch_model.build_model().to(device)
    lr = args.lr
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch_model.loss_fn()

    checkpoint = torch_training.TorchCheckpoint(args.checkpoint_dir, model, optimizer)
    initial_epoch = training.restore_together(checkpoint, args.resume)

    print(
        f"[train_torch_single] data={dataset.source} threads={threads} batch={args.batch_size} "
        f"lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
        flush=True,
    )
    timer = torch_training.EpochTimer()
    for epoch in range(initial_epoch, args.epochs):
        shuffle.manual_seed(args.seed * 1000 + epoch)  # each epoch its own order, resumable
        with timer.measure(images=steps * args.batch_size):
            epoch_loss = 0.0
            for batch, (x, y) in enumerate(itertools.islice(loader, steps)):
                step = epoch * steps + batch
                torch_training.call_hooks(callbacks, "on_train_batch_begin", step, model, optimizer)
                optimizer.zero_grad()
                x, y = x.to(device), y.to(device)
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                epoch_loss += loss.item()
                torch_training.call_hooks(callbacks, "on_train_batch_end", step, model, optimizer)
        print(f"epoch {epoch + 1}/{args.epochs}: loss={epoch_loss / steps:.4f}", flush=True)
        checkpoint.save(epoch + 1)

    metrics = torch_training.metrics_record(
        torch_training.evaluate(model, x_test, y_test),
        1,
        model,
        lr=lr,
        steps_per_epoch=steps,
        **timer.summary(),
    )
    print(
        f"[train_torch_single] test_loss={metrics['loss']:.4f} "
        f"test_accuracy={metrics['accuracy']:.4f} weights_sha256={metrics['weights_sha256']}",
        flush=True,
    )
    training.write_metrics(args.metrics_json, metrics)
    return 0


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_main

    sys.exit(run_main(main))
