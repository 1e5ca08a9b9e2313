"""Checks learners call from the exercise notebooks, and the list of exercises.

In a notebook::

    from hvdcourse.course.exercises import checks
    checks.ex04_ring(ring_allreduce)

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


EXERCISES = {
    e.id: e
    for e in (
        Exercise("ex01", "ex01_collectives", ("after_collectives",), checks_basic.ex01_collectives),
        Exercise("ex02", "ex02_global_mean", ("global_mean",), checks_basic.ex02_global_mean),
        Exercise("ex03", "ex03_sharding", ("shard_indices",), checks_basic.ex03_sharding),
        Exercise("ex04", "ex04_ring_allreduce", ("ring_allreduce",), checks_basic.ex04_ring),
        Exercise("ex05", "ex05_conversion", ("train_hvd",), checks_training.ex05_conversion),
        Exercise("ex06", "ex06_lr_warmup", ("optimizer_and_warmup",), checks_training.ex06_warmup),
        Exercise(
            "ex07",
            "ex07_rank0_checkpoints",
            ("distributed_callbacks",),
            checks_training.ex07_callbacks,
        ),
        Exercise("ex08", "ex08_timeline", ("time_per_phase",), checks_tools.ex08_timeline),
        Exercise(
            "ex09",
            "ex09_scaling",
            ("scaling_efficiency", "choose_setup"),
            checks_tools.ex09_scaling,
        ),
        Exercise("ex10", "ex10_slurm", ("job_script",), checks_tools.ex10_slurm),
        Exercise("ex11", "ex11_find_the_bug", ("bugs",), checks_tools.ex11_bugs),
        Exercise(
            "ex12",
            "ex12_column_parallel",
            ("shard_columns", "column_parallel_linear"),
            checks_scale.ex12_column_parallel,
        ),
        Exercise(
            "ex13",
            "ex13_pipeline_bubble",
            ("predicted_bubble", "measured_idle_share"),
            checks_scale.ex13_pipeline_bubble,
        ),
        Exercise(
            "ex14", "ex14_accumulation", ("accumulating_optimizer",), checks_scale.ex14_accumulation
        ),
        Exercise(
            "ex15", "ex15_torch_conversion", ("train_hvd",), checks_torch.ex15_torch_conversion
        ),
    )
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


ex01_collectives = _for_learners(checks_basic.ex01_collectives)
ex02_global_mean = _for_learners(checks_basic.ex02_global_mean)
ex03_sharding = _for_learners(checks_basic.ex03_sharding)
ex04_ring = _for_learners(checks_basic.ex04_ring)
ex05_conversion = _for_learners(checks_training.ex05_conversion)
ex06_warmup = _for_learners(checks_training.ex06_warmup)
ex07_callbacks = _for_learners(checks_training.ex07_callbacks)
ex08_timeline = _for_learners(checks_tools.ex08_timeline)
ex09_scaling = _for_learners(checks_tools.ex09_scaling)
ex10_slurm = _for_learners(checks_tools.ex10_slurm)
ex11_bugs = _for_learners(checks_tools.ex11_bugs)
ex12_column_parallel = _for_learners(checks_scale.ex12_column_parallel)
ex13_pipeline_bubble = _for_learners(checks_scale.ex13_pipeline_bubble)
ex14_accumulation = _for_learners(checks_scale.ex14_accumulation)
ex15_torch_conversion = _for_learners(checks_torch.ex15_torch_conversion)
