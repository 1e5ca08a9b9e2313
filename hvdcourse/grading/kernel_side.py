"""The grader's own cell, run in the student's kernel after the student's cells (lesson: instructor guide).

It reloads the course's check modules (undoing any change the notebook made to them), calls the
check of each exercise on the objects the notebook defined, and prints one tagged JSON line per
exercise that the runner reads back. The tag carries a nonce drawn after the student's cells ran.
"""
from __future__ import annotations

import importlib
import json
import sys

CHECK_MODULES = ("hvdcourse.exercises.result", "hvdcourse.exercises.common", "hvdcourse.exercises.paths",
                 "hvdcourse.exercises.harness", "hvdcourse.exercises.drivers", "hvdcourse.launch",
                 "hvdcourse.mpienv", "hvdcourse.exercises.checks_basic", "hvdcourse.exercises.checks_training",
                 "hvdcourse.exercises.checks_tools", "hvdcourse.exercises.checks")


def fresh_checks():
    """The checks module, reloaded with everything it depends on."""
    for name in CHECK_MODULES:
        module = sys.modules.get(name) or importlib.import_module(name)
        importlib.reload(module)
    return sys.modules["hvdcourse.exercises.checks"]


def grade(namespace: dict, nonce: str, exercises: list | None = None) -> None:
    checks = fresh_checks()
    from hvdcourse.exercises.result import CheckResult

    ids = exercises or [e.id for e in checks.EXERCISES.values() if all(n in namespace for n in e.answers)]
    for ex_id in ids:
        exercise = checks.EXERCISES[ex_id]
        missing = [n for n in exercise.answers if n not in namespace]
        try:
            result = exercise.check(*(namespace.get(n) for n in exercise.answers), quiet=True)
        except BaseException as err:  # noqa: B902 - a check must never take the batch down
            result = CheckResult(ex_id, exercise.title, problem=f"the check failed: {type(err).__name__}: {err}",
                                 status="error")
        if missing:
            result.problem = f"the notebook defines no {', '.join(missing)}"
            result.problem_hint = "keep the names given in the exercise, and run every cell before submitting"
            result.status = "error"
        sys.stdout.write(f"HVDCOURSE-RESULT {nonce} {json.dumps(result.to_dict())}\n")
        sys.stdout.flush()
