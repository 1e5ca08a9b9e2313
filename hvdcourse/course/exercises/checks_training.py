"""Checks of exercises 5-7: the 6-step conversion, LR scaling and warm-up, rank-0 checkpoints and
averaged metrics (lessons: Converting a Keras MNIST script to Horovod;
Horovod's design, explored live).

Each runs the learner's code on 2 ranks through :mod:`hvdcourse.course.exercises.harness` and judges what
the drivers observed, never what the code says about itself.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from hvdcourse.course.exercises.common import Stop, adam_lr_verdict, fmt, require_function
from hvdcourse.course.exercises.harness import describe_failure, run_on_ranks
from hvdcourse.course.exercises.result import check
from hvdcourse.examples.training import scaled_lr

BROADCAST_HINT = (
    "add hvd.callbacks.BroadcastGlobalVariablesCallback(0) to the callbacks: ranks start "
    "from different random weights until rank 0's are broadcast"
)


def _run_or_stop(c, key, driver, fn, hint, timeout, hints=None, **args):
    """Run the driver on 2 ranks; on failure record why (``hints(error)``: an exercise's own hint
    for what a rank raised, or None) and stop the check."""
    outcome = run_on_ranks(driver, fn, np=2, timeout=timeout, **args)
    if not outcome.all_ok:
        error = outcome.first_error() or {}
        if error.get("type") == "NotImplementedError":
            c.stop(
                "your function still raises NotImplementedError.",
                "replace every 'raise NotImplementedError(...)' line with your code",
                status="not-done",
            )
            raise Stop
        if "unexpected keyword argument 'lr'" in error.get("error", ""):
            hint = (
                "LearningRateWarmupCallback has no 'lr' argument (the source guide's mistake): "
                "it is initial_lr=, the scaled rate the warm-up ends at"
            )
        if hints is not None:
            hint = hints(error) or hint
        c.fail(key, describe_failure(outcome), hint)
        raise Stop
    c.ok(key)
    return outcome


def _files_of(outcome, rank):
    return [f for f in outcome.files.get(rank, []) if not f.startswith(".")]


# ------------------------------------------------------------------ exercise 5
TRAIN_ARGS = {
    "epochs": 2,
    "batch_size": 16,
    "lr": 1e-3,
    "max_steps": 3,
    "checkpoint_dir": "checkpoints",
}


@check(
    "ex05",
    "The 6-step conversion",
    {
        "runs": ("trains on 2 ranks and returns (model, x_train)", 1),
        "broadcast": ("after the first step both ranks hold rank 0's weights (broadcast)", 1),
        "identical": ("after training both ranks hold identical weights (DistributedOptimizer)", 1),
        "shards": (
            "the ranks trained on disjoint parts that together are the whole training set",
            1,
        ),
        "lr": (
            "the learning rate is scaled for the number of workers (Adam: by its square root)",
            1,
        ),
        "files": ("only rank 0 wrote checkpoint files", 1),
    },
)
def ex05_conversion(c, train_hvd, timeout: float = 300):
    """Exercise 5: ``train_hvd(epochs, batch_size, lr, max_steps, checkpoint_dir) -> (model, x_train)``."""
    require_function(c, train_hvd, "train_hvd")
    outcome = _run_or_stop(
        c,
        "runs",
        "conversion",
        train_hvd,
        "run train_single first and compare; then add the six steps one by one",
        timeout,
        **TRAIN_ARGS,
    )
    r0, r1 = outcome.values()
    if r0.get("first_digest") is None or r1.get("first_digest") is None:
        # equal weights without a training step prove nothing (an untrained model returned as is)
        c.fail(
            "broadcast",
            "no training step was taken: model.fit never ran a batch",
            "keep train_single's model.fit, with the callbacks and the sharded data",
        )
        c.fail("identical", "no training step was taken", "keep train_single's model.fit")
    else:
        c.judge(
            "broadcast",
            r0["first_digest"] == r1["first_digest"],
            "the ranks' weights differ right after the first step",
            BROADCAST_HINT,
        )
        wrap = (
            "wrap the optimizer: optimizer = hvd.DistributedOptimizer(optimizer), so every step "
            "applies the gradients averaged over all ranks"
        )
        c.judge(
            "identical",
            r0["digest"] == r1["digest"] and bool(r0.get("distributed")),
            "the ranks ended with different weights"
            if r0["digest"] != r1["digest"]
            else "the ranks ended with the same weights, but the optimizer is not Horovod's",
            wrap
            if r0["first_digest"] == r1["first_digest"]
            else BROADCAST_HINT + "; and wrap the optimizer in hvd.DistributedOptimizer",
        )
    full, parts = Counter(r0["all_examples"]), [Counter(r["examples"]) for r in (r0, r1)]
    together = parts[0] + parts[1]
    if together == full:
        c.ok("shards")
    else:
        overlap = sum((parts[0] & parts[1]).values())
        c.fail(
            "shards",
            f"rank 0 trained on {len(r0['examples'])} examples, rank 1 on "
            f"{len(r1['examples'])}, {overlap} in both; the training set has {len(r0['all_examples'])}",
            "x_train = x_train[hvd.rank()::hvd.size()] (same for y_train), or data.shard(...); "
            "return the x_train this rank trained on",
        )
    passed, detail, hint = adam_lr_verdict(r0["lrs"], TRAIN_ARGS["lr"], 2)
    if passed and r0["lrs"] != r1["lrs"]:
        passed, detail, hint = (
            False,
            "the ranks used different learning rates",
            "every rank must use the same rate",
        )
    c.judge("lr", passed, detail, hint)
    rank1, rank0 = _files_of(outcome, 1), _files_of(outcome, 0)
    if rank1:
        c.fail(
            "files",
            f"rank 1 wrote {fmt(rank1, 4)}",
            "create the checkpoint callback only when "
            "hvd.rank() == 0: ranks writing the same files corrupt them",
        )
    else:
        c.judge(
            "files",
            bool(rank0),
            "rank 0 wrote no checkpoint",
            "keep the checkpoint callback of train_single, on rank 0 only",
        )


# ------------------------------------------------------------------ exercise 6
WARMUP = {"base_lr": 0.01, "warmup_epochs": 2, "steps_per_epoch": 4, "epochs": 3}


def _warmup_hint(error):
    """Exercise 6's hint for what a rank raised, or None."""
    if "'float' object has no attribute 'dtype'" in error.get("error", ""):
        return (
            "the warm-up's momentum correction cannot set the momentum of TensorFlow 2.11+ optimizers "
            "(a Python number) in Horovod 0.28.1: pass momentum_correction=False to "
            "LearningRateWarmupCallback"
        )
    return None


@check(
    "ex06",
    "Scale the learning rate and warm it up",
    {
        "runs": ("trains on 2 ranks with your optimizer and callbacks", 1),
        "start": ("the first step uses the single-worker rate base_lr", 1),
        "target": ("after the warm-up the rate is base_lr x workers (SGD: the linear rule)", 1),
        "ramp": ("the rate rises step by step during the warm-up", 1),
        "averaged": ("gradients are averaged over the ranks (identical weights)", 1),
    },
)
def ex06_lr_warmup(c, optimizer_and_warmup, timeout: float = 300):
    """Exercise 6: ``optimizer_and_warmup(hvd, base_lr, warmup_epochs, steps_per_epoch) -> (opt, callbacks)``,
    SGD with momentum: the linear rule, :func:`hvdcourse.examples.training.scaled_lr` with ``"sgd"``."""
    base, size = WARMUP["base_lr"], 2
    target = scaled_lr(base, size, "sgd")  # SGD: the linear rule, base x size
    require_function(c, optimizer_and_warmup, "optimizer_and_warmup")
    outcome = _run_or_stop(
        c,
        "runs",
        "warmup",
        optimizer_and_warmup,
        "return (optimizer, [callbacks]); build them from hvd and the arguments",
        timeout,
        hints=_warmup_hint,
        **WARMUP,
    )
    r0, r1 = outcome.values()
    lrs = r0["lrs"]
    warm = WARMUP["warmup_epochs"] * WARMUP["steps_per_epoch"]
    step = (target - base) / warm  # one step of a linear ramp from base to base x size
    first = lrs[0]
    if np.isclose(first, target):
        hint = "the first step already uses the scaled rate: add hvd.callbacks.LearningRateWarmupCallback"
    elif first < base * 0.999:
        hint = (
            "the warm-up starts at initial_lr / hvd.size(): initial_lr is the scaled rate "
            "base_lr * hvd.size(), not base_lr"
        )
    else:
        hint = "start the warm-up from the single-worker rate base_lr"
    ramp = lrs[:warm]
    rising = all(b >= a - 1e-12 for a, b in zip(ramp, ramp[1:])) and len(set(np.round(ramp, 9))) > 2
    starts = base * 0.999 <= first <= (base + step) * 1.001
    if starts and not rising:  # base_lr throughout (no warm-up at all) starts "right" too
        c.fail(
            "start",
            f"the rate stayed at {first:g}: the single-worker rate counts as a start only when a "
            "warm-up follows",
            "add hvd.callbacks.LearningRateWarmupCallback",
        )
    else:
        c.judge(
            "start",
            starts,
            f"the first step used {first:g}; the warm-up should start at base_lr = {base:g}",
            hint,
        )
    after = lrs[warm:]
    hint = (
        "scale the rate: the optimizer's learning_rate and initial_lr are both base_lr * hvd.size()"
    )
    if after and np.allclose(after, base):
        hint = "the rate ends at base_lr, unscaled: " + hint
    c.judge(
        "target",
        bool(after) and np.allclose(after, target, rtol=1e-3),
        f"after the warm-up the steps used {fmt(after, 4)}; expected {target:g}",
        hint,
    )
    c.judge(
        "ramp",
        rising,
        f"during the warm-up the steps used {fmt(ramp)}",
        "pass warmup_epochs and steps_per_epoch to LearningRateWarmupCallback so it raises the rate "
        "a little before every step",
    )
    moved = bool(lrs) and min(lrs) > 0  # at a zero rate equal weights prove nothing
    c.judge(
        "averaged",
        r0["digest"] == r1["digest"] and bool(r0.get("distributed")) and moved,
        "the ranks ended with different weights"
        if r0["digest"] != r1["digest"]
        else "the ranks ended with the same weights, but not through Horovod's optimizer"
        + ("" if moved else " (the rate was zero: the weights never moved)"),
        "wrap the optimizer with hvd.DistributedOptimizer",
    )
    if r0["lrs"] != r1["lrs"]:
        c.fail(
            "target",
            "the ranks used different learning rates",
            "every rank must use the same schedule",
        )
    name = r0.get("optimizer", "SGD")
    if "sgd" not in name.lower():
        c.fail(
            "target",
            f"the optimizer is {name}; the exercise asks for SGD with momentum",
            "the linear rule with Horovod's warm-up (from initial_lr / N up to initial_lr) is SGD's recipe "
            "(Goyal et al.); for Adam the lesson scales by the square root of N instead",
        )


# ------------------------------------------------------------------ exercise 7
@check(
    "ex07",
    "Rank-0 checkpoints and averaged metrics",
    {
        "runs": ("model.fit runs on 2 ranks with your callbacks", 1),
        "broadcast": ("the ranks start from rank 0's weights", 1),
        "averaged": (
            "validation metrics are averaged: both ranks report the mean of their values",
            1,
        ),
        "rank0": ("rank 1 writes no files", 1),
        "checkpoint": ("rank 0 writes a checkpoint into checkpoint_dir", 1),
    },
)
def ex07_rank0_checkpoints(c, distributed_callbacks, timeout: float = 300):
    """Exercise 7: ``distributed_callbacks(hvd, checkpoint_dir) -> list`` of Keras callbacks."""
    require_function(c, distributed_callbacks, "distributed_callbacks")
    outcome = _run_or_stop(
        c,
        "runs",
        "callbacks",
        distributed_callbacks,
        "return a list of callbacks, e.g. [hvd.callbacks.BroadcastGlobalVariablesCallback(0), ...]",
        timeout,
    )
    r0, r1 = outcome.values()
    c.judge(
        "broadcast",
        r0["first_digest"] == r1["first_digest"],
        "the ranks' weights differ after the first step",
        BROADCAST_HINT,
    )
    before = [r["before"][-1].get("val_loss") for r in (r0, r1)]
    after = [r["after"][-1].get("val_loss") for r in (r0, r1)]
    averaged = (
        None not in after
        and np.isclose(after[0], after[1])
        and np.isclose(after[0], np.mean(before))
    )
    c.judge(
        "averaged",
        averaged,
        f"each rank measured val_loss {fmt(before)} on its part; they then reported {fmt(after)}",
        "add hvd.callbacks.MetricAverageCallback() (before the checkpoint callback): without it each "
        "rank judges the model on its own part of the validation set",
    )
    rank1, rank0 = _files_of(outcome, 1), _files_of(outcome, 0)
    in_dir = [f for f in rank0 if f.startswith("checkpoints")]
    if rank1:
        c.fail(
            "rank0",
            f"rank 1 wrote {fmt(rank1, 4)}",
            "append the checkpoint callback only if hvd.rank() == 0",
        )
    else:  # writing nothing at all is no rank-0 checkpointing
        c.judge(
            "rank0",
            bool(in_dir),
            "rank 1 wrote nothing, but neither did rank 0: this point comes with rank 0's checkpoint",
            "append the checkpoint callback only if hvd.rank() == 0",
        )
    c.judge(
        "checkpoint",
        bool(in_dir),
        f"rank 0 wrote {fmt(rank0, 4) if rank0 else 'nothing'}",
        "tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, 'weights-{epoch}.h5'), "
        "save_weights_only=True) on rank 0",
    )
