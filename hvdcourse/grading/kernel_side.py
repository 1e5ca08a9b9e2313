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


class OutputLimitExceeded(Exception):
    """A cell printed more than the grader accepts."""


def cap_output(limit: int) -> None:
    """Make print() in one cell fail past ``limit`` characters (an IPython startup file calls this).

    It stops a runaway loop where it prints, before megabytes reach the grader; the grader's own
    count of the kernel's messages stays the authority.
    """
    from IPython import get_ipython

    class Capped:
        def __init__(self, stream):
            self._stream, self.count = stream, 0

        def write(self, text):
            self.count += len(text)
            if self.count > limit:
                self.write = self._stream.write  # let the error itself be shown
                raise OutputLimitExceeded(f"[grader] this cell printed more than {limit // 1000} kB")
            return self._stream.write(text)

        def __getattr__(self, name):
            return getattr(self._stream, name)

    streams = [Capped(sys.stdout), Capped(sys.stderr)]
    sys.stdout, sys.stderr = streams

    def reset(*_):
        for stream in streams:
            stream.count = 0
            stream.__dict__.pop("write", None)

    get_ipython().events.register("pre_run_cell", reset)


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
