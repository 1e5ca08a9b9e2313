"""The grader as the tests start it: ``hvdcourse-grade`` in a process of its own, read back.

One helper for every test module of tests/grading (they import it as the samples' builder is
imported, from this folder), so that they all start, wait for and read the grader the same way.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys


def grade(
    folder, out, *options, env=None, timeout: float = 1500, launcher=(sys.executable,), cwd=None
) -> dict:
    """Grade the class in ``folder`` into ``out`` with ``options``; assert it exits 0. ``launcher``: how
    the grader's Python is started (another user's: ``("runuser", "-u", USER, "--", PYTHON)``).

    Returns ``rows`` (student -> their row of scores.csv), ``reports`` ((student, notebook name
    without .ipynb) -> its report in results.json), ``first`` (student -> the report of their first
    notebook), ``stdout`` and ``out``."""
    run = subprocess.run(
        [
            *launcher,
            "-m",
            "hvdcourse.course.grading.grader",
            str(folder),
            "--out",
            str(out),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(os.path.join(out, "scores.csv")) as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    with open(os.path.join(out, "results.json")) as fh:
        results = json.load(fh)
    return {
        "rows": rows,
        "reports": {(s["student"], nb["name"][:-6]): nb for s in results for nb in s["notebooks"]},
        "first": {s["student"]: s["notebooks"][0] for s in results if s["notebooks"]},
        "stdout": run.stdout,
        "out": str(out),
    }


def feedback(graded: dict, student: str) -> str:
    """The feedback file of ``student`` in a run of :func:`grade`."""
    with open(os.path.join(graded["out"], "feedback", f"{student}.md")) as fh:
        return fh.read()
