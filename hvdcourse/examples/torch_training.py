"""Training helpers shared by the PyTorch trainers (lesson: PyTorch with Horovod, and DDP).

Kept free of Horovod and of ``torch.distributed``, like :mod:`hvdcourse.examples.training` for the
Keras trainers, so the single-process, Horovod and DDP scripts differ only in their distributed
lines. What both frameworks share (the epoch/error broadcast of a resume, the checkpoint folder
check, metrics files, reports to the launcher) comes from :mod:`hvdcourse.examples.training`.
"""

from __future__ import annotations

import os
import re
import time

from hvdcourse.examples.training import CheckpointError, EpochTimer, print_and_write, report


def set_threads(threads: int, processes_on_node: int = 1) -> int:
    """Give PyTorch ``threads`` intra-op threads (0: share this node's cores among its processes)."""
    import torch

    if threads <= 0:
        threads = max(1, (os.cpu_count() or 1) // max(1, processes_on_node))
    torch.set_num_threads(threads)
    return threads


def warmup_lr(lr: float, workers: int, step: int, warmup_steps: int) -> float:
    """The learning rate at global step ``step``: from ``lr / workers`` up to ``lr`` in ``warmup_steps``.

    The ramp of Horovod's Keras ``LearningRateWarmupCallback`` (Goyal et al. 2017), which always
    starts at ``lr / workers``: the rate of one worker under the linear rule, below it under the
    square-root rule the course uses for Adam; ``warmup_steps = 0``: ``lr`` at once.
    Computed from the step alone, so a resumed run continues on the same schedule.
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return lr
    progress = step / warmup_steps
    return lr / workers * (1 + (workers - 1) * progress)


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def evaluate(model, images, labels, batch_size: int = 256, reduce_sum=None) -> dict:
    """Loss and accuracy of ``model`` on (images, labels); ``reduce_sum`` adds up every rank's sums.

    Each rank evaluates its own part; summing (loss total, correct, count) across ranks gives the
    exact metrics of the whole set, whatever the part sizes.
    """
    import torch

    from hvdcourse.examples.torch_model import loss_fn

    model.eval()
    device = next(model.parameters()).device  # the batches go where the model is
    loss, total_loss, correct = loss_fn(), 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            x = images[start : start + batch_size].to(device)
            y = labels[start : start + batch_size].to(device)
            logits = model(x)
            total_loss += float(loss(logits, y)) * len(y)
            correct += float((logits.argmax(dim=1) == y).sum())
    model.train()
    # on the model's device: DDP's NCCL backend reduces GPU tensors only
    sums = torch.tensor(
        [total_loss, correct, float(len(labels))], dtype=torch.float64, device=device
    )
    if reduce_sum is not None:
        sums = reduce_sum(sums)
    total_loss, correct, count = (float(v) for v in sums)
    return {"loss": total_loss / count, "accuracy": correct / count, "examples": int(count)}


def call_hooks(callbacks, event: str, step: int, model, optimizer) -> None:
    """Call ``event`` (``on_train_batch_begin`` or ``on_train_batch_end``) of each callback that has it.

    A PyTorch loop has no callback system of its own; the course's trainers accept objects with
    either method, called as ``hook(step, model, optimizer)`` (the fault injection and the state
    probe of :mod:`hvdcourse.course.lessons.faults` are such objects). :class:`CallbackOptimizer` calls them
    from inside ``zero_grad()`` and ``step()``.
    """
    for callback in callbacks:
        hook = getattr(callback, event, None)
        if hook is not None:
            hook(step, model, optimizer)


class CallbackOptimizer:
    """``optimizer`` with the trainers' per-step machinery inside its ``zero_grad()`` and ``step()``,
    so that a training loop keeps PyTorch's four lines (zero_grad, forward and loss, backward, step).

    ``zero_grad()`` begins step ``first_step + k`` (its k-th call): each callback's
    ``on_train_batch_begin(step, model, optimizer)``, then the wrapped ``zero_grad()``; ``step()`` is
    the wrapped ``step()``, then each callback's ``on_train_batch_end(step, model, optimizer)``
    (:func:`call_hooks`; ``optimizer`` is the wrapped one). :attr:`timer` (:class:`EpochTimer`)
    times each epoch of ``steps_per_epoch`` steps, from its first ``zero_grad()`` to its last
    ``step()``, at ``images_per_step`` images a step. Anything else (``state_dict``,
    ``param_groups``, Horovod's ``synchronize``) is the wrapped optimizer's.
    """

    def __init__(
        self,
        optimizer,
        model,
        callbacks=(),
        steps_per_epoch: int = 1,
        images_per_step: int = 0,
        first_step: int = 0,
    ):
        self.optimizer, self.model, self.callbacks = optimizer, model, list(callbacks)
        self.steps_per_epoch, self.images_per_step = steps_per_epoch, images_per_step
        self.step_number, self.timer, self.epoch_began = first_step, EpochTimer(), None

    def zero_grad(self) -> None:
        if self.epoch_began is None or self.step_number % self.steps_per_epoch == 0:
            self.epoch_began = time.perf_counter()
        call_hooks(
            self.callbacks, "on_train_batch_begin", self.step_number, self.model, self.optimizer
        )
        self.optimizer.zero_grad()

    def step(self, closure=None):
        loss = self.optimizer.step() if closure is None else self.optimizer.step(closure)
        call_hooks(
            self.callbacks, "on_train_batch_end", self.step_number, self.model, self.optimizer
        )
        self.step_number += 1
        if self.step_number % self.steps_per_epoch == 0:
            seconds = time.perf_counter() - self.epoch_began
            self.timer.epochs.append((seconds, self.steps_per_epoch * self.images_per_step))
        return loss

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


class LearningRateWarmup:
    """A callback that sets the learning rate before every step: :func:`warmup_lr`, from
    ``lr / workers`` up to ``lr`` over ``warmup_steps`` steps (the PyTorch twin of Horovod's Keras
    ``LearningRateWarmupCallback``)."""

    def __init__(self, lr: float, workers: int, warmup_steps: int):
        self.lr, self.workers, self.warmup_steps = lr, workers, warmup_steps

    def on_train_batch_begin(self, step, model, optimizer):
        set_lr(optimizer, warmup_lr(self.lr, self.workers, step, self.warmup_steps))


def optimizer_iterations(optimizer) -> int:
    """The optimizer's step count (Adam keeps one per parameter; they agree)."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(state["step"])
    return 0


def training_state(model, optimizer) -> dict:
    """``optimizer_iterations``, ``weights_sha256`` and ``optimizer_sha256``: the same keys as the
    Keras trainers' :func:`hvdcourse.examples.training.training_state`."""
    from hvdcourse.examples.torch_model import optimizer_digest, weights_digest

    return {
        "optimizer_iterations": optimizer_iterations(optimizer),
        "weights_sha256": weights_digest(model),
        "optimizer_sha256": optimizer_digest(optimizer),
    }


def report_final_metrics(evaluated: dict, workers: int, model, **extra) -> dict:
    """The final metrics of this worker, reported to the launcher (kind ``final``) and returned: the
    record of :func:`hvdcourse.examples.training.report_final_metrics`, with PyTorch's weights digest."""
    from hvdcourse.examples.torch_model import weights_digest

    record = {
        **evaluated,
        "workers": int(workers),
        "weights_sha256": weights_digest(model),
        **extra,
    }
    report("final", record)
    return record


def finish(
    script: str, evaluated: dict, model, metrics_json=None, workers: int = 1, rank=None, **extra
) -> int:
    """The end of a PyTorch trainer: report, print and write its final metrics; return 0, its exit
    status (as :func:`hvdcourse.examples.training.finish` does for the Keras trainers)."""
    return print_and_write(
        script, report_final_metrics(evaluated, workers, model, **extra), metrics_json, rank
    )


class TorchCheckpoint:
    """Saves model, optimizer state and the epoch number after every epoch; restores the latest.

    The PyTorch twin of :class:`hvdcourse.examples.training.EpochCheckpoint`: one file per epoch,
    ``epoch-N.pt``, written to a temporary name and renamed (a crash mid-write leaves the previous
    checkpoint intact); the ``keep`` newest are kept. Each save and restore prints one line with the
    epoch, the optimizer's step count and digests of weights and optimizer state, and reports it.
    """

    PATTERN = re.compile(r"^epoch-(\d+)\.pt$")

    def __init__(self, directory: str, model, optimizer, keep: int = 2):
        self.directory = directory
        self.model = model
        self.optimizer = optimizer
        self.keep = keep
        self.epoch = 0

    def state(self) -> dict:
        return {"epoch": self.epoch, **training_state(self.model, self.optimizer)}

    def describe(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.state().items())

    def saved(self) -> list:
        """``[(epoch, path), ...]`` of the checkpoints in the folder, oldest first."""
        if not os.path.isdir(self.directory):
            return []
        found = [
            (int(m.group(1)), name)
            for name in os.listdir(self.directory)
            if (m := self.PATTERN.match(name))
        ]
        return [(epoch, os.path.join(self.directory, name)) for epoch, name in sorted(found)]

    def save(self, epochs_done: int) -> str:
        """Save the state after ``epochs_done`` epochs; print, report and return the file's path."""
        import torch

        self.epoch = epochs_done
        path = os.path.join(self.directory, f"epoch-{epochs_done}.pt")
        state = {
            "epoch": epochs_done,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        for _, old in self.saved()[: -self.keep]:
            os.remove(old)
        print(f"[checkpoint] saved {self.describe()} to {path}", flush=True)
        report("saved", {**self.state(), "path": path})
        return path

    def restore(self) -> int:
        """Restore the latest checkpoint if any; return the number of epochs already done.

        Raises :class:`~hvdcourse.examples.training.CheckpointError` when the file is corrupt or
        does not fit the model.
        """
        import torch

        saved = self.saved()
        if not saved:
            return 0
        latest = saved[-1][1]
        try:
            state = torch.load(latest, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated, overwritten, or not written by torch.save
            raise self._error(latest, "the file is corrupt or not a PyTorch checkpoint", err)
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.epoch = int(state["epoch"])
        except Exception as err:  # another model, or a file with other contents
            raise self._error(latest, "it does not fit this model and optimizer", err)
        print(f"[checkpoint] restored {self.describe()} from {latest}", flush=True)
        report("restored", {**self.state(), "path": latest})
        return self.epoch

    def _error(self, path: str, what: str, err: Exception) -> CheckpointError:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return CheckpointError(
            f"cannot restore checkpoint {path!r}: {what} ({type(err).__name__}: {first[:120]}). "
            f"Delete {self.directory!r} or pass --no-resume to start again."
        )

    def restore_or_error(self):
        """Like :meth:`restore`, but return the error instead of raising it (rank 0 broadcasts it)."""
        try:
            return self.restore()
        except CheckpointError as err:
            return err
