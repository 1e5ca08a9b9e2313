"""Where the exercise sources, learner and solution notebooks live.

The grader runs student code with ``HVDCOURSE_GRADING=1``: then :func:`solutions_dir` refuses to
answer, so no course helper can lead student code to the solutions.
"""

from __future__ import annotations

import os

from hvdcourse.runtime.paths import ROOT

SOURCE_DIR = os.path.join(ROOT, "exercises", "source")
EXERCISES_DIR = os.path.join(ROOT, "exercises")
SOLUTIONS_DIR = os.path.join(ROOT, "solutions")
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def grading() -> bool:
    """True inside a grader's sandbox."""
    return os.environ.get("HVDCOURSE_GRADING") == "1"


def solutions_dir() -> str:
    """The folder of the solution notebooks (not available while grading)."""
    if grading():
        raise PermissionError("the solutions are not available while a notebook is being graded")
    return SOLUTIONS_DIR


def data_path(name: str) -> str:
    """Path of a data file shipped with the exercises (buggy script, timeline, scaling curve)."""
    path = os.path.join(DATA_DIR, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"exercise data file {name!r} is missing from {DATA_DIR}; "
            "reinstall the course package (pip install -e .)"
        )
    return path
