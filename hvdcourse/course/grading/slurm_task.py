"""One task of ``hvdcourse-grade --slurm``, on a compute node (lesson: Instructor guide).

Slurm starts it as ``python -m hvdcourse.course.grading.slurm_task --task TASKS.json`` (the batch
script of :mod:`hvdcourse.course.grading.slurm`): it grades its unit with the local grader
(:func:`hvdcourse.course.grading.grader.grade_local`, one notebook at a time) and stores the outcomes
where the submitting grader merges them. It lives apart from :mod:`~hvdcourse.course.grading.slurm`
because the grader imports that module to submit the array, and this one imports the grader.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile

from hvdcourse.course.grading import grader, slurm


def run_task(tasks_path: str, index: int) -> int:
    """One array task: grade the unit ``index`` here, one notebook at a time, and store the outcomes."""
    # scancel: no process of a notebook may outlive the task
    signal.signal(signal.SIGTERM, grader.stop_active)
    with open(tasks_path) as fh:
        tasks = json.load(fh)
    student, nbs = tasks["units"][index]
    args = argparse.Namespace(
        **tasks["options"], jobs=1, submissions=tasks["submissions"], out=tasks["out"]
    )
    outcomes = grader.grade_local(args, [(student, nbs)], rank_slots=1)
    path = slurm.result_path(os.path.dirname(tasks_path), index)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(outcomes, fh)
    os.replace(tmp, path)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="One task of hvdcourse-grade --slurm (started by Slurm)."
    )
    parser.add_argument(
        "--task", required=True, help="the tasks.json written by hvdcourse-grade --slurm"
    )
    parser.add_argument(
        "--index", type=int, default=None, help="the unit to grade (default: SLURM_ARRAY_TASK_ID)"
    )
    args = parser.parse_args(argv)
    index = args.index if args.index is not None else os.environ.get("SLURM_ARRAY_TASK_ID")
    if index is None:
        parser.error(
            "no SLURM_ARRAY_TASK_ID: this runs as a task of hvdcourse-grade --slurm (or give --index)"
        )
    return run_task(args.task, int(index))


if __name__ == "__main__":
    sys.exit(main())
