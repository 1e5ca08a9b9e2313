"""How fast the grader grades: runs of ``hvdcourse-grade`` measured and recorded (lesson: Instructor guide).

The figures come from ``book/data/grading_throughput.json``, written by :func:`record`::

    python -m hvdcourse.course.bench.grading_throughput record CLASS --out OUT --jobs 1
    python -m hvdcourse.course.bench.grading_throughput record CLASS --out OUT --jobs auto

where CLASS holds students with every solution notebook (``python -m hvdcourse.course.bench.grading_throughput
--class-dir CLASS --students N`` makes it; the serial run grades one student, the --jobs auto run
one or more: with several, its time per student includes how the notebooks of different students
share the cores). :func:`summary` turns the two runs into the numbers the instructor guide shows: the time per
student and for a class, the CPU seconds each notebook's processes used (the floor no schedule on
these cores can beat), and what each added Slurm node gives, computed from the measured times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time

from hvdcourse.runtime import machine
from hvdcourse.runtime.paths import BOOK_DATA, ROOT

DATA = os.path.join(BOOK_DATA, "grading_throughput.json")
CLASS = 30  # learners: the class size the instructor guide plans for
GOAL_MIN = 15  # minutes: the time a class of CLASS should take (issue 12)


def runs(path: str = DATA) -> dict:
    """{--jobs value: recorded local run}."""
    with open(path) as fh:
        return {r["jobs"]: r for r in json.load(fh)["runs"] if r["mode"] == "local"}


def summary(path: str = DATA) -> dict:
    """The serial and --jobs auto figures and the Slurm estimates per added node."""
    found = runs(path)
    if "1" not in found or "auto" not in found:
        raise ValueError(
            f"{path} needs a --jobs 1 and a --jobs auto run; record them with the commands in "
            "hvdcourse.course.bench.grading_throughput's docstring"
        )
    serial, auto = found["1"], found["auto"]
    times = sorted(serial["notebook_seconds"].values())
    cores = auto["machine"]["cores"]
    load = max(serial["load_average_before"][0], auto["load_average_before"][0])
    # the leaner of the two runs in CPU time, and where that time went
    lean = min((serial, auto), key=lambda r: r["cpu_seconds"] / r["students"])
    cpu = lean["cpu_seconds"] / lean["students"]
    per_student = min(r["wall_seconds"] / r["students"] for r in (serial, auto))
    phases = notebook_cpu(lean)
    heavy = sorted(
        (
            n
            for n, c in phases["notebooks"].items()
            if c > phases["total"] / len(phases["notebooks"])
        ),
        key=lambda n: -phases["notebooks"][n],
    )
    return {
        "date": auto["date"][:10],
        "cpu": auto["machine"]["cpu"],
        "cores": cores,
        "load": load,
        "loaded": load > cores,
        "notebooks": serial["notebooks"] // serial["students"],
        "jobs_auto": auto["jobs_used"],
        "students_auto": auto["students"],
        "serial_s": serial["wall_seconds"] / serial["students"],
        "auto_s": auto["wall_seconds"] / auto["students"],
        "speedup": (serial["wall_seconds"] / serial["students"])
        / (auto["wall_seconds"] / auto["students"]),
        "notebook_min_s": times[0],
        "notebook_median_s": times[len(times) // 2],
        "notebook_max_s": times[-1],
        # a Slurm node like this machine grades a student (one array task) in the better of the two
        # measured times per student: one more node, this many more students per hour
        "students_per_hour_per_node": 3600 / per_student,
        # the most a node like this one can give, whatever its load: its cores' CPU seconds per hour
        # over the CPU seconds a student takes
        "students_per_hour_per_node_max": cores * 3600 / cpu,
        # one task per notebook, with a free core for each: a student takes as long as the slowest notebook
        "per_notebook_floor_s": times[-1],
        # the processes' CPU time (the leaner of the two runs): at that cost these cores need cpu / cores
        "cpu_per_student_s": cpu,
        "class_floor_min": CLASS * cpu / cores / 60,
        "class_auto_min": CLASS * auto["wall_seconds"] / auto["students"] / 60,
        "goal_min": GOAL_MIN,
        # cores that the measured CPU time needs to grade CLASS learners within the goal
        "cores_for_goal": math.ceil(CLASS * cpu / (GOAL_MIN * 60)),
        # where that CPU time went, per student: the learner's cells in the kernel, the answer runs
        # (checks with their ranks), the judges, the rest (the grader and its runners); and the
        # notebooks above the mean
        "cpu_notebook_s": phases["notebook"],
        "cpu_answers_s": phases["answers"],
        "cpu_judge_s": phases["judge"],
        "cpu_other_s": max(0.0, cpu - phases["total"]),
        "heavy_notebooks": heavy,
        "heavy_cpu_s": sum(phases["notebooks"][n] for n in heavy),
        "full_marks": all(
            r.get("statuses") == ["ok"] and r.get("points") == r.get("max_points", -1) > 0
            for r in (serial, auto)
        ),
    }


def notebook_cpu(run: dict) -> dict:
    """CPU seconds per student of a recorded run: by phase, in all, and per notebook name (students'
    notebooks of the same name averaged)."""
    found = run.get("notebook_cpu_seconds") or {}
    if not found:
        raise ValueError(
            "the recorded run has no CPU seconds per notebook; record it again with the commands in "
            "hvdcourse.course.bench.grading_throughput's docstring"
        )
    students = run["students"]
    out = {phase: 0.0 for phase in ("notebook", "answers", "judge")}
    names = {}
    for key, phases in found.items():
        for phase in out:
            out[phase] += phases.get(phase, 0.0) / students
        name = key.split("/")[-1].removesuffix(".ipynb")
        names[name] = names.get(name, 0.0) + sum(phases.values()) / students
    out["total"] = sum(out.values())
    out["notebooks"] = names
    return out


def nodes_for(students: int, minutes: float, path: str = DATA) -> int:
    """Slurm nodes like the measuring machine needed to grade ``students`` within ``minutes``."""
    per_node = summary(path)["students_per_hour_per_node"] * minutes / 60
    return max(1, math.ceil(students / per_node))


def solution_notebooks() -> list:
    """The solution notebooks, one per exercise (what a student's full set holds)."""
    solutions = os.path.join(ROOT, "solutions")
    return sorted(n for n in os.listdir(solutions) if n.endswith(".ipynb"))


def make_class(folder: str, students: int = 1) -> str:
    """A class of ``students`` students, each holding every solution notebook (what the throughput
    runs grade)."""
    solutions = os.path.join(ROOT, "solutions")
    for number in range(1, students + 1):
        student = os.path.join(folder, f"student{number:02d}")
        os.makedirs(student, exist_ok=True)
        for name in solution_notebooks():
            shutil.copy(os.path.join(solutions, name), student)
    return folder


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every process it started that has ended."""
    return sum(
        u.ru_utime + u.ru_stime
        for u in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def record(submissions: str, out: str, jobs: str, data: str = DATA, grader_options=()) -> dict:
    """Grade ``submissions`` with ``hvdcourse-grade --jobs JOBS`` and add the run's timings to the JSON
    file ``data`` (one entry per mode and --jobs, replaced by a newer run): machine, load average
    before and after, wall and CPU time, and each notebook's seconds, CPU seconds and stages."""
    load_before, cpu_before, start = os.getloadavg(), cpu_seconds(), time.monotonic()
    cmd = [sys.executable, "-m", "hvdcourse.course.grading.grader", submissions, "--out", out]
    subprocess.run([*cmd, "--jobs", jobs, *grader_options], check=True)
    seconds = time.monotonic() - start
    with open(os.path.join(out, "results.json")) as fh:
        graded = json.load(fh)
    # {"student/notebook": report} of every notebook graded
    reports = {f"{s['student']}/{nb['name']}": nb for s in graded for nb in s["notebooks"]}
    cores = len(os.sched_getaffinity(0))
    entry = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cpu": machine.cpu_model(),
            "cores": cores,
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        },
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "mode": "slurm" if "--slurm" in grader_options else "local",
        "jobs": jobs,
        "jobs_used": max(1, cores) if jobs == "auto" else int(jobs),  # the grader's --jobs auto
        "students": len(graded),
        "notebooks": len(reports),
        "wall_seconds": round(seconds, 1),
        "cpu_seconds": round(cpu_seconds() - cpu_before, 1),
        "notebook_seconds": {k: r.get("seconds", 0) for k, r in reports.items()},
        # CPU seconds of each notebook's three processes: the learner's cells in the kernel, the answer
        # run (the checks observing the learner's functions, with their ranks) and the judge
        "notebook_cpu_seconds": {k: r.get("cpu", {}) for k, r in reports.items()},
        # wall seconds of each notebook's stages, from its start to its report
        "notebook_stage_seconds": {k: r.get("timing", {}) for k, r in reports.items()},
        "statuses": sorted({r.get("status", "?") for r in reports.values()}),
        "points": sum(x.get("score", 0) for r in reports.values() for x in r.get("results", [])),
        "max_points": sum(
            x.get("max_score", 0) for r in reports.values() for x in r.get("results", [])
        ),
    }
    found = {"runs": []}
    if os.path.isfile(data):
        with open(data) as fh:
            found = json.load(fh)
    found["runs"] = [
        r for r in found.get("runs", []) if (r["mode"], r["jobs"]) != (entry["mode"], entry["jobs"])
    ]
    found["runs"].append(entry)
    with open(data, "w") as fh:
        json.dump(found, fh, indent=1)
        fh.write("\n")
    print(f"recorded the timings in {data}", flush=True)
    return entry


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["record"]:
        parser = argparse.ArgumentParser(
            prog="python -m hvdcourse.course.bench.grading_throughput record",
            description="Grade a class with hvdcourse-grade and record the run's timings; "
            "options after -- go to the grader (e.g. -- --slurm).",
        )
        parser.add_argument("submissions", help="the class (--class-dir makes one)")
        parser.add_argument("--out", required=True, help="the grader's results folder")
        parser.add_argument("--jobs", default="1", help="the grader's --jobs (1 or auto)")
        parser.add_argument("--data", default=DATA, help=f"the record (default {DATA})")
        parser.add_argument("grader_options", nargs="*", help="more options for the grader")
        args = parser.parse_args(argv[1:])
        record(args.submissions, args.out, args.jobs, args.data, args.grader_options)
        return 0
    parser = argparse.ArgumentParser(
        description="Grading throughput: make the measuring class, or print the "
        "figures recorded in book/data/grading_throughput.json."
    )
    parser.add_argument(
        "--class-dir", help="write a class of students holding every solution here and stop"
    )
    parser.add_argument(
        "--students", type=int, default=1, help="students in the class --class-dir writes"
    )
    parser.add_argument("--data", default=DATA)
    args = parser.parse_args(argv)
    if args.class_dir:
        print(make_class(args.class_dir, args.students))
        return 0
    print(json.dumps(summary(args.data), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
