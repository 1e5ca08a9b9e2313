"""Check of exercise 15: a single-process PyTorch script converted to Horovod (lesson: PyTorch with
Horovod, and DDP).

It runs the learner's function on 2 ranks through :mod:`hvdcourse.course.exercises.harness` with
the trusted driver :func:`hvdcourse.course.exercises.drivers_torch.torch_conversion`, and judges what the
driver observed on each rank, never what the code says about itself. The feedback names the rank
that went wrong and what it held, compared with rank 0 or with the checkpoint rank 0 restored.
"""

from __future__ import annotations

import numpy as np

from hvdcourse.course.exercises.checks_training import _files_of, _run_or_stop
from hvdcourse.course.exercises.common import ADAM_LR_HOW, adam_lr_verdict, fmt, require_function
from hvdcourse.course.exercises.result import check

TRAIN_ARGS = {
    "epochs": 2,
    "batch_size": 16,
    "lr": 1e-3,
    "max_steps": 3,
    "checkpoint_dir": "checkpoints",
}
START = "start.pt"  # the checkpoint only rank 0's folder holds
RESTORE_HINT = (
    "keep train_single's restore of start.pt, on rank 0 (only rank 0's folder has the file)"
)
WRAP_FIRST_HINT = (
    "wrap the optimizer before restoring: hvd.DistributedOptimizer returns a new optimizer that "
    "shares the parameter groups of the one it wraps, not its state"
)


@check(
    "ex15",
    "Convert a PyTorch script to Horovod",
    {
        "runs": ("trains on 2 ranks and returns (model, loader, metrics)", 1),
        "weights": (
            "before the first step both ranks hold the weights rank 0 restored (broadcast_parameters)",
            1,
        ),
        "optimizer": (
            "before the first step both ranks hold the optimizer state rank 0 restored "
            "(broadcast_optimizer_state)",
            1,
        ),
        "identical": ("after training both ranks hold identical weights (DistributedOptimizer)", 1),
        "named": (
            "the DistributedOptimizer names each gradient after its parameter (named_parameters)",
            1,
        ),
        "sampler": (
            "in an epoch the ranks train on disjoint parts that together cover the training set",
            1,
        ),
        "epochs": ("every epoch has a new order of the data (sampler.set_epoch)", 1),
        "lr": (
            "the learning rate is scaled for the number of workers (Adam: by its square root)",
            1,
        ),
        "loss": ("the reported training loss is averaged over the ranks", 1),
        "files": ("only rank 0 wrote checkpoint files", 1),
    },
)
def ex15_torch_conversion(c, train_hvd, timeout: float = 300):
    """Exercise 15: ``train_hvd(epochs, batch_size, lr, max_steps, checkpoint_dir, resume_from)
    -> (model, loader, metrics)``."""
    require_function(c, train_hvd, "train_hvd")
    outcome = _run_or_stop(
        c,
        "runs",
        "torch_conversion",
        train_hvd,
        "run train_single first and compare; then add the steps one by one",
        timeout,
        hints=_failure_hint,
        **TRAIN_ARGS,
    )
    r0, r1 = outcome.values()
    start = r0["start"]
    _judge_weights(c, r0, r1, start)
    _judge_optimizer(c, r0, r1, start)
    _judge_identical(c, r0, r1)
    _judge_sampler(c, r0, r1)
    _judge_lr(c, r0, r1)
    _judge_loss(c, r0, r1)
    rank1, rank0 = _files_of(outcome, 1), [f for f in _files_of(outcome, 0) if f != START]
    if rank1:
        c.fail(
            "files",
            f"rank 1 wrote {fmt(rank1, 4)}",
            "save only when hvd.rank() == 0: ranks writing the same files corrupt them",
        )
    else:
        c.judge(
            "files",
            bool(rank0),
            "rank 0 wrote no checkpoint",
            "keep train_single's save, on rank 0 only",
        )


def _failure_hint(error: dict) -> str | None:
    """A hint for what the ranks raised, when the error says more than the generic one."""
    text = error.get("error", "")
    if "FileNotFoundError" in text and START in text:
        return (
            f"only rank 0's folder holds {START} in this check (as on rank 0's local disk): restore it "
            "when hvd.rank() == 0, then broadcast weights and optimizer state to the others"
        )
    if "not been initialized" in text:
        return "call hvd.init() first, before anything that asks for the rank or the size"
    if "mutually exclusive" in text and "shuffle" in text:
        return "with a sampler, leave out shuffle=True: the DistributedSampler shuffles"
    return None


def _judge_weights(c, r0, r1, start):
    first0, first1 = r0["first"].get("weights"), r1["first"].get("weights")
    if first0 != start["weights"]:
        c.fail("weights", "rank 0 did not start from the weights of start.pt", RESTORE_HINT)
    elif first1 != first0:
        before = (
            "the weights rank 0 had before restoring"
            if first1 in r0["built"]
            else "its own random weights"
        )
        c.fail(
            "weights",
            f"rank 1's weights differ from rank 0's before the first step: rank 1 holds {before}",
            "did you broadcast the parameters? hvd.broadcast_parameters(model.state_dict(), root_rank=0), "
            "after rank 0 has restored start.pt",
        )
    else:
        c.ok("weights")


def _judge_optimizer(c, r0, r1, start):
    first0, first1 = r0["first"], r1["first"]
    if first0.get("optimizer") != start["optimizer"]:
        if first0.get("weights") == start["weights"]:
            detail = (
                "rank 0 restored start.pt's weights, but at the first step its optimizer did not hold "
                f"start.pt's state (Adam's moments of {start['entries']} parameters)"
            )
            hint = WRAP_FIRST_HINT
        else:
            detail, hint = (
                "rank 0's optimizer state at the first step is not the one in start.pt",
                RESTORE_HINT,
            )
        c.fail("optimizer", detail, hint)
    elif first1.get("optimizer") != first0.get("optimizer"):
        held = (
            f"Adam state for {first1.get('entries')} parameters"
            if first1.get("entries")
            else "no Adam state at all"
        )
        c.fail(
            "optimizer",
            f"rank 1's optimizer state differs from rank 0's before the first step: rank 1 "
            f"has {held}, rank 0 the moments of start.pt",
            "did you broadcast the optimizer state? hvd.broadcast_optimizer_state(optimizer, root_rank=0), "
            "after rank 0 has restored start.pt",
        )
    else:
        c.ok("optimizer")


def _judge_identical(c, r0, r1):
    distributed = r0["first"].get("distributed") and r1["first"].get("distributed")
    if r0["digest"] == r1["digest"]:
        c.ok("identical")
    elif not distributed:
        c.fail(
            "identical",
            "the ranks ended with different weights: the optimizer is not Horovod's",
            "optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters()): "
            "every step then applies the gradients averaged over the ranks",
        )
    else:
        c.fail(
            "identical",
            "the ranks ended with different weights although the optimizer is Horovod's",
            "they must start equal (broadcast weights and optimizer state) and use the same learning rate",
        )
    names = r0["first"].get("names") or []
    if not distributed:
        c.fail(
            "named",
            "no hvd.DistributedOptimizer was used",
            "wrap the optimizer with named_parameters=...",
        )
    else:
        unnamed = [n for n in names if n.startswith("allreduce.noname")]
        c.judge(
            "named",
            bool(names) and not unnamed,
            f"the gradients' allreduces are named {fmt(unnamed, 3)}",
            "pass named_parameters=model.named_parameters() to hvd.DistributedOptimizer: each allreduce "
            "is then named after its parameter, in the timeline and in Horovod's error messages",
        )


def _judge_sampler(c, r0, r1):
    part0, part1, n = set(r0["indices"]), set(r1["indices"]), r0["n_train"]
    overlap, union, size = len(part0 & part1), len(part0 | part1), 2
    if overlap < size and union >= n - (size - 1):
        c.ok("sampler")
    elif overlap >= min(len(part0), len(part1)) * 0.9:
        c.fail(
            "sampler",
            f"rank 0 and rank 1 both drew {len(part0)} of the {n} examples "
            f"({r0['sampler']}): they train on the same data",
            "give the DataLoader sampler=DistributedSampler(train_set, num_replicas=hvd.size(), "
            "rank=hvd.rank(), seed=...) instead of shuffle=True",
        )
    else:
        c.fail(
            "sampler",
            f"rank 0 drew {len(part0)} examples, rank 1 {len(part1)}, {overlap} of them on both; "
            f"together they cover {union} of {n}",
            "use the same seed on every rank: the DistributedSampler draws one permutation for all ranks "
            "and gives each its own slice",
        )
    epoch, last = r0["sampler_epoch"], TRAIN_ARGS["epochs"] - 1
    if r0["sampler"] != "DistributedSampler":
        c.fail(
            "epochs", f"the loader's sampler is a {r0['sampler']}", "use a DistributedSampler first"
        )
    else:
        c.judge(
            "epochs",
            epoch == last and r1["sampler_epoch"] == last,
            f"after {TRAIN_ARGS['epochs']} epochs the samplers were at epoch {r0['sampler_epoch']} "
            f"(rank 0) and {r1['sampler_epoch']} (rank 1)",
            "call sampler.set_epoch(epoch) at the start of every epoch, on every rank: otherwise every "
            "epoch repeats the first one's order",
        )


def _judge_lr(c, r0, r1):
    passed, detail, hint = adam_lr_verdict(r0["lrs"], TRAIN_ARGS["lr"], 2)
    if r0["lrs"] != r1["lrs"]:
        c.fail(
            "lr",
            f"the ranks used different learning rates: rank 0 {fmt(r0['lrs'], 4)}, "
            f"rank 1 {fmt(r1['lrs'], 4)}",
            f"scale the rate on every rank ({ADAM_LR_HOW}); restore() sets the rate again after "
            "loading: pass it the scaled one",
        )
    else:
        c.judge("lr", passed, detail, hint)


def _judge_loss(c, r0, r1):
    steps = TRAIN_ARGS["max_steps"]
    own = [float(np.mean(r["losses"][-steps:])) if r["losses"] else float("nan") for r in (r0, r1)]
    mean = float(np.mean(own))
    reported = [r0["train_loss"], r1["train_loss"]]
    averaged = all(np.isclose(v, mean, rtol=1e-4, atol=1e-6) for v in reported)
    c.judge(
        "loss",
        averaged,
        f"rank 0 reported train_loss {reported[0]:.4f} (its own: {own[0]:.4f}), rank 1 {reported[1]:.4f} "
        f"(its own: {own[1]:.4f}); the average over the ranks is {mean:.4f}",
        "average it over the ranks: hvd.allreduce(torch.tensor(value)).item() (the default op is the "
        "average), on every rank",
    )
