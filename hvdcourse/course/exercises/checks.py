"""Checks learners call from the exercise notebooks, and the list of exercises.

In a notebook::

    from hvdcourse.course.exercises import checks
    checks.ex04_ring_allreduce(ring_allreduce)

prints what is right, what is wrong and a hint (never a traceback), and returns a
:class:`~hvdcourse.course.exercises.result.CheckResult` that the grader reads. Checks of distributed code
run it on 2 ranks (see :mod:`hvdcourse.course.exercises.harness`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hvdcourse.course.exercises import (
    checks_basic,
    checks_scale,
    checks_tools,
    checks_torch,
    checks_training,
)
from hvdcourse.course.exercises.paths import grading

# Re-exported: the learner notebooks call checks.data_path, checks.show_buggy_script and read
# checks.BUG_KINDS (exercises 08, 09 and 11), so these names are part of this module's interface.
from hvdcourse.course.exercises.checks_tools import BUG_KINDS, show_buggy_script  # noqa: F401
from hvdcourse.course.exercises.paths import data_path  # noqa: F401


@dataclass(frozen=True)
class Exercise:
    """One exercise: its id, notebook name, the names its check reads, and the check."""

    id: str
    name: str
    answers: tuple
    check: object

    @property
    def title(self) -> str:
        return self.check.title

    @property
    def label(self) -> str:
        return f"Exercise {int(self.id[2:])}"


def _exercise(check, *answers: str) -> Exercise:
    """The exercise of ``check``: its id from the check, its notebook's name from the check's name."""
    return Exercise(check.exercise, check.__name__, answers, check)


# The 15 exercises, in order: each check is named as its notebook, with the names it reads.
EXERCISES = {
    e.id: e
    for e in (
        _exercise(checks_basic.ex01_collectives, "after_collectives"),
        _exercise(checks_basic.ex02_global_mean, "global_mean"),
        _exercise(checks_basic.ex03_sharding, "shard_indices"),
        _exercise(checks_basic.ex04_ring_allreduce, "ring_allreduce"),
        _exercise(checks_training.ex05_conversion, "train_hvd"),
        _exercise(checks_training.ex06_lr_warmup, "optimizer_and_warmup"),
        _exercise(checks_training.ex07_rank0_checkpoints, "distributed_callbacks"),
        _exercise(checks_tools.ex08_timeline, "time_per_phase"),
        _exercise(checks_tools.ex09_scaling, "scaling_efficiency", "choose_setup"),
        _exercise(checks_tools.ex10_slurm, "job_script"),
        _exercise(checks_tools.ex11_find_the_bug, "bugs"),
        _exercise(checks_scale.ex12_column_parallel, "shard_columns", "column_parallel_linear"),
        _exercise(checks_scale.ex13_pipeline_bubble, "predicted_bubble", "measured_idle_share"),
        _exercise(checks_scale.ex14_accumulation, "accumulating_optimizer"),
        _exercise(checks_torch.ex15_torch_conversion, "train_hvd"),
    )
}

# The names of the checks in the course's first runs: learners' notebooks saved then still call them.
OLD_NAMES = {
    "ex04_ring": "ex04_ring_allreduce",
    "ex06_warmup": "ex06_lr_warmup",
    "ex07_callbacks": "ex07_rank0_checkpoints",
    "ex11_bugs": "ex11_find_the_bug",
}


def _for_learners(check):
    """The learner-facing check: while a notebook is being graded it defers to the grader's own cell."""

    @functools.wraps(check)
    def wrapper(*answers, **options):
        if grading():
            print(f"(graded: {check.__name__} runs once, in the grader's own cell after yours)")
            return None
        return check(*answers, **options)

    return wrapper


# What a notebook calls: checks.<notebook name>(answers), e.g. checks.ex04_ring_allreduce(ring_allreduce)
globals().update({e.name: _for_learners(e.check) for e in EXERCISES.values()})
globals().update({old: globals()[new] for old, new in OLD_NAMES.items()})
