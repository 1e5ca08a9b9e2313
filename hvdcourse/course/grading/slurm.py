"""``hvdcourse-grade --slurm``: grade a class as a Slurm job array (lesson: Instructor guide).

The grader writes the list of units (one per student, or one per notebook) and the grading options
into a shared folder, submits one array task per unit (``sbatch --array``), waits for the array
with a time limit, and merges each task's results into the same scores, feedback and summary files
as a local run. Every task is a grader of its own on its compute node (:func:`task`, run by the
array's batch script as this module's :func:`main`): the same sandbox, limits and judge as locally
(:mod:`hvdcourse.course.grading.local`), one notebook at a time. On the time limit, or on Ctrl-C,
the array is cancelled (``scancel``); a unit without results gets a row saying so.

The submitting side's stages: :func:`write_tasks`, :func:`submit`, :func:`wait`, :func:`merge`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from hvdcourse.course.grading import local
from hvdcourse.course.grading.job import Status, failed
from hvdcourse.course.grading.options import GRACE, Options
from hvdcourse.runtime.paths import ROOT

POLL = 3  # seconds between two looks at the queue


class SlurmError(RuntimeError):
    """A Slurm command failed; the message says which and what it printed."""


def units_of(students: list, per: str) -> list:
    """[[student, [notebooks]]]: what each array task grades."""
    if per == "notebook":
        return [[s, [p]] for s, nbs in students for p in nbs]
    return [[s, list(nbs)] for s, nbs in students if nbs]


def task_minutes(notebooks: int, timeout: float) -> int:
    """Slurm's --time for a task: each notebook's worst case (both runs and the grace), plus a minute."""
    return max(1, math.ceil(notebooks * (2 * timeout + GRACE) / 60) + 1)


@dataclasses.dataclass(frozen=True)
class Array:
    """How the class is cut into array tasks and submitted (``--slurm-*``, ``--sbatch``)."""

    work: str  # the shared folder of the tasks, logs and results
    per: str = "student"  # what one task grades: "student" or "notebook"
    wait: float | None = (
        None  # seconds before the array is cancelled (None: every notebook's budget)
    )
    sbatch: tuple = ()  # sbatch options


def script(tasks_path: str, logs: str, units: list, options: Options, sbatch=()) -> str:
    """The array's batch script: the #SBATCH header and one line that runs a task."""
    longest = max(len(nbs) for _, nbs in units)
    header = [
        "#SBATCH --job-name=hvdcourse-grade",
        f"#SBATCH --array=0-{len(units) - 1}",
        f"#SBATCH --output={logs}/task-%a.log",
        f"#SBATCH --time={task_minutes(longest, options.timeout)}",
        "#SBATCH --ntasks=1",
    ]
    header += [f"#SBATCH {option}" for option in sbatch]
    boot = (
        f"import sys; sys.path.insert(0, {ROOT!r}); "
        "from hvdcourse.course.grading.slurm import main; sys.exit(main())"
    )
    run = " ".join(shlex.quote(a) for a in [sys.executable, "-c", boot, "--task", tasks_path])
    return "#!/bin/bash\n" + "\n".join(header) + f"\nexec {run}\n"


def slurm(cmd: list, timeout: float = 60) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise SlurmError(
            f"{cmd[0]} not found: run --slurm on a Slurm login node (or load its module)"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"'{' '.join(cmd)}' did not answer within {timeout:.0f} s; is Slurm up (sinfo)?"
        ) from None
    if proc.returncode != 0:
        raise SlurmError(f"'{' '.join(cmd)}' failed: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def running(job_id: str) -> int:
    """How many tasks of the array are still pending or running."""
    try:
        out = slurm(["squeue", "-h", "-r", "-j", job_id, "-o", "%i %T"])
    except SlurmError as err:
        if "Invalid job id" in str(err):  # ended long enough ago that the controller forgot it
            return 0
        raise
    return sum(1 for line in out.splitlines() if line.strip())


def result_path(work: str, index: int) -> str:
    return os.path.join(work, "results", f"task-{index}.json")


def write_tasks(array: Array, options: Options, submissions: str, out: str, students: list):
    """The units, their tasks file and the batch script in ``array.work``; (units, batch script)."""
    work = array.work
    os.makedirs(os.path.join(work, "results"), exist_ok=True)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    for index in range(10_000):  # results of an earlier run in the same folder are not this run's
        if not os.path.exists(result_path(work, index)):
            break
        os.remove(result_path(work, index))
    units = units_of(students, array.per)
    tasks_path = os.path.join(work, "tasks.json")
    with open(tasks_path, "w") as fh:
        json.dump(
            {
                "units": [[s, [os.path.abspath(p) for p in nbs]] for s, nbs in units],
                "options": options.shared(),
                "submissions": os.path.abspath(submissions),
                "out": os.path.abspath(out),
            },
            fh,
        )
    batch = os.path.join(work, "grade.sbatch")
    with open(batch, "w") as fh:
        fh.write(script(tasks_path, os.path.join(work, "logs"), units, options, array.sbatch))
    return units, batch


def submit(batch: str) -> str:
    """``sbatch`` the array; its job id."""
    return slurm(["sbatch", "--parsable", batch]).strip().split(";")[0]


def wait(work: str, job_id: str, units: list, seconds: float) -> bool:
    """Print each task's end until the array is done; cancel it after ``seconds`` (True then)."""
    total = sum(len(nbs) for _, nbs in units)
    start, seen = time.monotonic(), set()
    try:
        while True:
            finished = running(job_id) == 0
            for index in range(len(units)):
                if index not in seen and os.path.isfile(result_path(work, index)):
                    seen.add(index)
                    done = sum(len(units[i][1]) for i in seen)
                    print(
                        f"[{done}/{total}] task {job_id}_{index} ({units[index][0]}) done  "
                        f"{local.progress_line(done, total, time.monotonic() - start)}",
                        flush=True,
                    )
            if finished:
                return False
            if time.monotonic() - start > seconds:
                slurm(["scancel", job_id])
                print(
                    f"the array ran longer than {seconds:g} s and was cancelled (scancel {job_id})",
                    flush=True,
                )
                return True
            time.sleep(POLL)
    except KeyboardInterrupt:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
        print(
            f"interrupted: Slurm array {job_id} cancelled; no results written",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(130) from None


def grade(array: Array, options: Options, submissions: str, out: str, students: list) -> list:
    """Submit the array, wait for it, return [(student, outcome)] as :func:`~hvdcourse.course.grading.local.grade_local` does."""
    units, batch = write_tasks(array, options, submissions, out, students)
    total = sum(len(nbs) for _, nbs in units)
    seconds = array.wait or total * options.notebook_budget + 120
    job_id = submit(batch)
    print(
        f"submitted Slurm array {job_id}: {len(units)} task(s) for {total} notebook(s) of {len(students)} "
        f"student(s); waiting at most {seconds:g} s (scancel {job_id} stops it); logs in {array.work}/logs",
        flush=True,
    )
    timed_out = wait(array.work, job_id, units, seconds)
    return merge(array.work, job_id, units, timed_out, seconds)


def merge(work: str, job_id: str, units: list, timed_out: bool, wait: float) -> list:
    """Every task's results; a unit without them gets one report per notebook saying why."""
    outcomes = []
    for index, (student, nbs) in enumerate(units):
        try:
            with open(result_path(work, index)) as fh:
                found = json.load(fh)
            outcomes += [(s, outcome) for s, outcome in found]
            continue
        except (OSError, ValueError):
            pass
        log = os.path.join(work, "logs", f"task-{index}.log")
        tail = ""
        if os.path.isfile(log):
            lines = [
                line for line in open(log, errors="replace").read().splitlines() if line.strip()
            ]
            tail = f"; the task's log ends with: {lines[-1][:200]}" if lines else ""
        why = (
            f"its Slurm task {job_id}_{index} did not finish within {wait:g} s and was cancelled"
            if timed_out
            else f"its Slurm task {job_id}_{index} ended without results{tail} (log: {log})"
        )
        status = Status.TIMEOUT if timed_out else Status.GRADER_ERROR
        for path in nbs:
            report = failed(status, why, seconds=0)
            outcomes.append((student, {"name": os.path.basename(path), "report": report}))
    return outcomes


# ------------------------------------------------------------------ one task, on a compute node
def task(tasks_path: str, index: int) -> int:
    """One array task: grade the unit ``index`` here, one notebook at a time, and store the outcomes."""
    # scancel: no process of a notebook may outlive the task
    signal.signal(signal.SIGTERM, local.stop_active)
    with open(tasks_path) as fh:
        tasks = json.load(fh)
    student, nbs = tasks["units"][index]
    shared = dict(tasks["options"], deny=tuple(tasks["options"].get("deny") or ()))
    options = Options(**shared, jobs=1, rank_slots=1)
    outcomes = local.grade_local(options, tasks["submissions"], tasks["out"], [(student, nbs)])
    path = result_path(os.path.dirname(tasks_path), index)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(outcomes, fh)
    os.replace(tmp, path)
    return 0


def main(argv=None) -> int:
    """One task of ``hvdcourse-grade --slurm`` (the array's batch script runs it)."""
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
    return task(args.task, int(index))


if __name__ == "__main__":
    sys.exit(main())
