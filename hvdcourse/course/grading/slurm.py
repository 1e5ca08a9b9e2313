"""``hvdcourse-grade --slurm``: grade a class as a Slurm job array (lesson: Instructor guide).

The grader writes the list of units (one per student, or one per notebook) and the grading options
into a shared folder, submits one array task per unit (``sbatch --array``), waits for the array
with a time limit, and merges each task's results into the same scores, feedback and summary files
as a local run. Every task is a grader of its own on its compute node
(``python -m hvdcourse.course.grading.slurm_task --task TASKS.json``): the same sandbox, limits and judge as
locally, one notebook at a time. On the time limit, or on Ctrl-C, the array is cancelled
(``scancel``); a unit without results gets a row saying so.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import time

from hvdcourse.course.grading.common import GRACE, progress_line
from hvdcourse.runtime.paths import ROOT

OPTIONS = (
    "timeout",
    "cell_timeout",
    "output_cap",
    "mem_mb",
    "nproc",
    "cpu",
    "deny",
    "no_hide",
    "unsafe_no_sandbox",
    "keep",
)
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


def script(tasks_path: str, logs: str, units: list, args) -> str:
    """The array's batch script: the #SBATCH header and one line that runs a task."""
    longest = max(len(nbs) for _, nbs in units)
    header = [
        "#SBATCH --job-name=hvdcourse-grade",
        f"#SBATCH --array=0-{len(units) - 1}",
        f"#SBATCH --output={logs}/task-%a.log",
        f"#SBATCH --time={task_minutes(longest, args.timeout)}",
        "#SBATCH --ntasks=1",
    ]
    header += [f"#SBATCH {option}" for option in args.sbatch]
    boot = (
        f"import sys; sys.path.insert(0, {ROOT!r}); "
        "from hvdcourse.course.grading.slurm_task import main; sys.exit(main())"
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


def grade(args, students: list) -> list:
    """Submit the array, wait for it, return [(student, outcome)] as the local grader's ``grade_local`` does."""
    work = os.path.abspath(args.slurm_dir or os.path.join(args.out, "slurm"))
    os.makedirs(os.path.join(work, "results"), exist_ok=True)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    for index in range(10_000):  # results of an earlier run in the same folder are not this run's
        if not os.path.exists(result_path(work, index)):
            break
        os.remove(result_path(work, index))
    units = units_of(students, args.slurm_per)
    tasks_path = os.path.join(work, "tasks.json")
    with open(tasks_path, "w") as fh:
        json.dump(
            {
                "units": [[s, [os.path.abspath(p) for p in nbs]] for s, nbs in units],
                "options": {k: getattr(args, k) for k in OPTIONS},
                "submissions": os.path.abspath(args.submissions),
                "out": os.path.abspath(args.out),
            },
            fh,
        )
    batch = os.path.join(work, "grade.sbatch")
    with open(batch, "w") as fh:
        fh.write(script(tasks_path, os.path.join(work, "logs"), units, args))
    total = sum(len(nbs) for _, nbs in units)
    wait = args.slurm_wait or total * (2 * args.timeout + GRACE) + 120
    job_id = slurm(["sbatch", "--parsable", batch]).strip().split(";")[0]
    print(
        f"submitted Slurm array {job_id}: {len(units)} task(s) for {total} notebook(s) of {len(students)} "
        f"student(s); waiting at most {wait:g} s (scancel {job_id} stops it); logs in {work}/logs",
        flush=True,
    )
    start, seen, timed_out = time.monotonic(), set(), False
    try:
        while True:
            finished = running(job_id) == 0
            for index in range(len(units)):
                if index not in seen and os.path.isfile(result_path(work, index)):
                    seen.add(index)
                    done = sum(len(units[i][1]) for i in seen)
                    print(
                        f"[{done}/{total}] task {job_id}_{index} ({units[index][0]}) done  "
                        f"{progress_line(done, total, time.monotonic() - start)}",
                        flush=True,
                    )
            if finished:
                break
            if time.monotonic() - start > wait:
                timed_out = True
                slurm(["scancel", job_id])
                print(
                    f"the array ran longer than {wait:g} s and was cancelled (scancel {job_id})",
                    flush=True,
                )
                break
            time.sleep(POLL)
    except KeyboardInterrupt:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
        print(
            f"interrupted: Slurm array {job_id} cancelled; no results written",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(130) from None
    return merge(work, job_id, units, timed_out, wait)


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
        for path in nbs:
            outcomes.append(
                (
                    student,
                    {
                        "name": os.path.basename(path),
                        "report": {
                            "status": "timeout" if timed_out else "grader-error",
                            "problem": why,
                            "errors": [],
                            "results": [],
                            "violations": [],
                            "seconds": 0,
                        },
                    },
                )
            )
    return outcomes
