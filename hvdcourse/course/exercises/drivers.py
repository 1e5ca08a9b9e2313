"""The rank side of the checks, by name: what :mod:`hvdcourse.course.exercises.harness` runs on each rank.

A check names its driver (``run_on_ranks("ring", ...)``); the rank runs it as
``driver(fn, rank, size, **args)`` in its own folder and returns plain data that the check judges.
The drivers observe instead of trusting: they record the learning rate before every batch, the
weights after the first batch and at the end, the metrics before and after the learner's callbacks,
and fingerprints of the examples each rank trained on. Each exercise group's drivers live beside its
checks:

* :mod:`~hvdcourse.course.exercises.drivers_basic` (exercises 1-4, :mod:`~hvdcourse.course.exercises.checks_basic`);
* :mod:`~hvdcourse.course.exercises.drivers_training` (exercises 5-7, :mod:`~hvdcourse.course.exercises.checks_training`);
* :mod:`~hvdcourse.course.exercises.drivers_scale` (exercises 12-14, :mod:`~hvdcourse.course.exercises.checks_scale`);
* :mod:`~hvdcourse.course.exercises.drivers_torch` (exercise 15, :mod:`~hvdcourse.course.exercises.checks_torch`).

Exercises 8-11 (:mod:`~hvdcourse.course.exercises.checks_tools`) run nothing on ranks.
"""

from __future__ import annotations

from hvdcourse.course.exercises.drivers_basic import (
    call,
    global_mean,
    local_values,
    ring,
    ring_input,
)
from hvdcourse.course.exercises.drivers_scale import (
    accumulation,
    accumulation_inputs,
    column_inputs,
    column_parallel,
    pipeline_idle,
)
from hvdcourse.course.exercises.drivers_torch import torch_conversion, write_start_checkpoint
from hvdcourse.course.exercises.drivers_training import callbacks, conversion, fingerprints, warmup

# the drivers a check may name, and the inputs its check computes the truth from
__all__ = [
    "accumulation",
    "accumulation_inputs",
    "call",
    "callbacks",
    "column_inputs",
    "column_parallel",
    "conversion",
    "fingerprints",
    "global_mean",
    "local_values",
    "pipeline_idle",
    "ring",
    "ring_input",
    "torch_conversion",
    "warmup",
    "write_start_checkpoint",
]
