"""The rank side of exercise 15: a PyTorch training run observed from outside the learner's code.

Trusted code: :mod:`hvdcourse.course.exercises.harness` calls it as ``driver(fn, rank, size, **args)``
inside the rank's own folder (by its name in :mod:`hvdcourse.course.exercises.drivers`); it returns
JSON-able data that the checks of :mod:`hvdcourse.course.exercises.checks_torch` judge.
"""

from __future__ import annotations


# ---------------------------------------------------------------- PyTorch + Horovod (exercise 15)
def write_start_checkpoint(path: str, lr: float, seed: int = 7) -> dict:
    """A checkpoint of the course's PyTorch model after one Adam step: ``{"model", "optimizer"}``.

    Returns the digests of its weights and optimizer state, which the check compares with what
    each rank holds before its first step.
    """
    import torch

    from hvdcourse.examples import torch_model

    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = torch_model.build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x = torch.rand((8, 1, 28, 28), generator=generator)
    y = torch.randint(0, 10, (8,), generator=generator)
    torch_model.loss_fn()(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    return {
        "weights": torch_model.weights_digest(model),
        "optimizer": torch_model.optimizer_digest(optimizer),
        "entries": len(optimizer.state),
    }


class TorchObserver:
    """Watches a PyTorch training run from outside the learner's code.

    It wraps ``torch_model.build_model`` (each rank's model starts from different weights, and its
    training forward passes are counted), ``torch_model.loss_fn`` (the training losses of each step)
    and registers a global optimizer step pre-hook: at each real step (one that follows a training
    forward pass; Horovod's zero-gradient step inside ``broadcast_optimizer_state`` and the inner
    optimizer's step under ``DistributedOptimizer`` are not counted) it records the learning rate,
    and at the first one the weights and the optimizer state, before they are updated.
    """

    def __init__(self, rank: int):
        self.rank = rank
        self.model = None
        self.forward_pending = False
        self.lrs, self.losses = [], []
        self.first = {}
        self.built = []  # weights digest of each model built, before any training

    def install(self):
        import torch
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        from hvdcourse.examples import torch_model

        observer, build, make_loss = self, torch_model.build_model, torch_model.loss_fn

        def observed_build(*args, **kwargs):
            model = build(*args, **kwargs)
            generator = torch.Generator().manual_seed(1000 + observer.rank)
            with torch.no_grad():  # ranks start different: only a broadcast aligns them
                for parameter in model.parameters():
                    parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
            model.register_forward_pre_hook(observer._forward)
            observer.model = model
            observer.built.append(torch_model.weights_digest(model))
            return model

        def observed_loss(*args, **kwargs):
            loss = make_loss(*args, **kwargs)

            def compute(*inputs, **options):
                value = loss(*inputs, **options)
                if torch.is_grad_enabled():  # training, not evaluation
                    observer.losses.append(float(value.detach()))
                return value

            return compute

        torch_model.build_model, torch_model.loss_fn = observed_build, observed_loss
        register_optimizer_step_pre_hook(self._step)

    def _forward(self, module, inputs):
        if module.training:
            self.forward_pending = True

    def _step(self, optimizer, args, kwargs):
        from hvdcourse.examples import torch_model

        if not self.forward_pending:
            return
        self.forward_pending = False
        self.lrs.append(float(optimizer.param_groups[0]["lr"]))
        if len(self.lrs) == 1:
            names = getattr(optimizer, "_parameter_names", None)
            self.first = {
                "weights": torch_model.weights_digest(self.model) if self.model else None,
                "optimizer": torch_model.optimizer_digest(optimizer),
                "entries": len(optimizer.state),
                "distributed": names is not None,
                "names": sorted(str(n) for n in names.values()) if names else [],
            }


def torch_conversion(fn, rank, size, resume_from="start.pt", **train_args):
    """``fn(**train_args, resume_from=...) -> (model, loader, metrics)`` on each rank, observed.

    Only rank 0's folder holds ``resume_from`` (as a checkpoint on rank 0's local disk would be):
    the learner restores it on rank 0 and broadcasts. What comes back: the weights and optimizer
    state before the first step, the learning rate of every step, the losses, the indices the
    loader's sampler gives this rank in an epoch, the final weights and the returned metrics.
    """
    import torch

    from hvdcourse.examples import torch_model

    start = write_start_checkpoint(resume_from, train_args.get("lr", 1e-3)) if rank == 0 else None
    observer = TorchObserver(rank)
    observer.install()
    returned = fn(resume_from=resume_from, **train_args)
    if not (isinstance(returned, tuple) and len(returned) == 3):
        raise TypeError(
            "return (model, loader, metrics): the trained model, the training DataLoader "
            "and the dict of metrics"
        )
    model, loader, metrics = returned
    if not isinstance(metrics, dict) or "train_loss" not in metrics:
        raise TypeError("return the metrics as a dict with 'train_loss', as train_single does")
    sampler = getattr(loader, "sampler", None)
    if sampler is None:
        raise TypeError("the second value returned must be the training DataLoader")
    epoch_seen = getattr(sampler, "epoch", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(0)
    return {
        "start": start,
        "built": observer.built,
        "first": observer.first,
        "lrs": observer.lrs,
        "losses": observer.losses,
        "digest": torch_model.weights_digest(model),
        "train_loss": float(metrics["train_loss"]),
        "sampler": type(sampler).__name__,
        "sampler_epoch": epoch_seen,
        "indices": [int(i) for i in sampler],
        "n_train": len(loader.dataset),
        "threads": torch.get_num_threads(),
    }
