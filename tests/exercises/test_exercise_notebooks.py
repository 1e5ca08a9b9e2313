"""The generated notebooks, executed as a learner would: solutions pass every check, learner versions
fail only at their placeholders (and their checks say "not done yet")."""

import os
import re
import sys

import nbformat
import pytest

from hvdcourse.course.exercises import paths
from hvdcourse.course.exercises.timing import execute_notebook

NAMES = sorted(f[:-6] for f in os.listdir(paths.SOLUTIONS_DIR) if f.endswith(".ipynb"))

sys.path.insert(0, os.path.join(paths.ROOT, "tests", "grading"))
# the solutions with 2-rank checks that the grader's tests run and check in full (no cell error, every
# check passed): run there once, not here again
from grading_samples import GRADED_SOLUTIONS  # noqa: E402


def execute(path, folder):
    """Run every cell (errors kept in the outputs); return the executed notebook."""
    return execute_notebook(nbformat.read(path, as_version=4), folder)


def check_cells(nb):
    return [
        c
        for c in nb.cells
        if c.cell_type == "code" and re.search(r"^checks\.ex\d\d_", c.source, re.M)
    ]


def text_of(cell):
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
    )


def errors_of(nb):
    return [
        (i, o.ename, o.evalue)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in GRADED_SOLUTIONS])
def test_solution_notebook_runs_without_error_and_passes_its_checks(name, tmp_path):
    nb = execute(os.path.join(paths.SOLUTIONS_DIR, name + ".ipynb"), str(tmp_path))
    assert errors_of(nb) == []
    reports = [text_of(c) for c in check_cells(nb)]
    assert reports and all(re.search(r"all \d+ checks passed", r) for r in reports), reports


@pytest.mark.parametrize("name", NAMES)
def test_learner_notebook_fails_only_at_its_placeholders(name, tmp_path):
    nb = execute(os.path.join(paths.EXERCISES_DIR, name + ".ipynb"), str(tmp_path))
    label = f"Exercise {int(name[2:4])}: "
    assert all(
        ename == "NotImplementedError" and evalue.startswith(label)
        for _, ename, evalue in errors_of(nb)
    ), errors_of(nb)
    reports = [text_of(c) for c in check_cells(nb)]
    assert reports and all("not done yet" in r for r in reports), reports
