"""Single-process PyTorch MNIST trainer: the starting point of the PyTorch conversion (lesson: PyTorch with Horovod, and DDP).

Run: ``python -m hvdcourse.examples.train_torch_single --epochs 3``. Its Horovod twin,
``train_torch_hvd.py``, has the same lines in the same order plus the ``# Horovod:`` ones; the
model and data are those of the Keras scripts.
"""

from __future__ import annotations

import itertools
import sys

from hvdcourse.examples import data, torch_model, torch_training, training
from hvdcourse.examples.cli import training_parser


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: objects with ``on_train_batch_begin``/``_end(step, model, optimizer)``."""
    args = training_parser("Train the course's MNIST CNN with PyTorch on one process.").parse_args(
        argv
    )

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import torch
    from torch.utils.data import DataLoader, TensorDataset

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
    steps = training.steps_per_epoch(len(train_set), args.batch_size, max_steps=args.max_steps)

    model = torch_model.build_model().to(device)
    lr = args.lr
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch_model.loss_fn()

    checkpoint = torch_training.TorchCheckpoint(args.checkpoint_dir, model, optimizer)
    initial_epoch = training.resume_from_checkpoint(checkpoint, args.resume)

    # The callbacks and an epoch timer run inside zero_grad() and step(), so that the loop below
    # keeps PyTorch's four lines.
    optimizer = torch_training.CallbackOptimizer(
        optimizer,
        model,
        callbacks,
        steps_per_epoch=steps,
        images_per_step=args.batch_size,
        first_step=initial_epoch * steps,
    )

    print(
        f"[train_torch_single] data={dataset.source} threads={threads} batch={args.batch_size} "
        f"lr={lr:g} steps/epoch={steps} start_epoch={initial_epoch}",
        flush=True,
    )
    for epoch in range(initial_epoch, args.epochs):
        # Each epoch its own order, the same again if the run resumes.
        shuffle.manual_seed(args.seed * 1000 + epoch)
        epoch_loss = 0.0
        for x, y in itertools.islice(loader, steps):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        print(f"epoch {epoch + 1}/{args.epochs}: loss={epoch_loss / steps:.4f}", flush=True)
        checkpoint.save(epoch + 1)

    metrics = torch_training.evaluate(model, x_test, y_test)
    return torch_training.finish(
        "train_torch_single",
        metrics,
        model,
        args.metrics_json,
        lr=lr,
        steps_per_epoch=steps,
        **optimizer.timer.summary(),
    )


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
