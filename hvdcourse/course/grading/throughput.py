"""How fast the grader grades, from recorded runs (lesson: Instructor guide).

The figures come from ``book/data/grading_throughput.json``, written by the grader itself::

    hvdcourse-grade CLASS --out OUT --jobs 1    --record book/data/grading_throughput.json
    hvdcourse-grade CLASS --out OUT --jobs auto --record book/data/grading_throughput.json

where CLASS holds one student with the 11 solution notebooks (``python -m hvdcourse.course.grading.throughput
--class-dir CLASS`` makes it). :func:`summary` turns the two runs into the numbers the instructor
guide shows, including what each added Slurm node gives, computed from the measured times.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys

from hvdcourse.runtime.paths import BOOK_DATA, ROOT

DATA = os.path.join(BOOK_DATA, "grading_throughput.json")
CLASS = 30  # learners: the class size the instructor guide plans for


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
            "hvdcourse.course.grading.throughput's docstring"
        )
    serial, auto = found["1"], found["auto"]
    times = sorted(serial["notebook_seconds"].values())
    cores = auto["machine"]["cores"]
    load = max(serial["load_average_before"][0], auto["load_average_before"][0])
    cpu = min(r["cpu_seconds"] / r["students"] for r in (serial, auto))
    return {
        "date": auto["date"][:10],
        "cpu": auto["machine"]["cpu"],
        "cores": cores,
        "load": load,
        "loaded": load > cores,
        "notebooks": serial["notebooks"],
        "jobs_auto": auto["jobs_used"],
        "serial_s": serial["wall_seconds"],
        "auto_s": auto["wall_seconds"],
        "speedup": serial["wall_seconds"] / auto["wall_seconds"],
        "notebook_min_s": times[0],
        "notebook_median_s": times[len(times) // 2],
        "notebook_max_s": times[-1],
        # a Slurm node like this machine grades a student (one array task) in the better of the two
        # measured times: one more node, this many more students per hour
        "students_per_hour_per_node": 3600 / min(serial["wall_seconds"], auto["wall_seconds"]),
        # one task per notebook, with a free core for each: a student takes as long as the slowest notebook
        "per_notebook_floor_s": times[-1],
        # the processes' CPU time (the leaner of the two runs): at that cost these cores need cpu / cores
        "cpu_per_student_s": cpu,
        "class_floor_min": CLASS * cpu / cores / 60,
        "class_auto_min": CLASS * auto["wall_seconds"] / auto["students"] / 60,
        "full_marks": all(
            r.get("statuses") == ["ok"] and r.get("points") == r.get("max_points", -1) > 0
            for r in (serial, auto)
        ),
    }


def nodes_for(students: int, minutes: float, path: str = DATA) -> int:
    """Slurm nodes like the measuring machine needed to grade ``students`` within ``minutes``."""
    per_node = summary(path)["students_per_hour_per_node"] * minutes / 60
    return max(1, math.ceil(students / per_node))


def make_class(folder: str) -> str:
    """A class of one student holding the 11 solution notebooks (what the throughput runs grade)."""
    student = os.path.join(folder, "student")
    os.makedirs(student, exist_ok=True)
    solutions = os.path.join(ROOT, "solutions")
    for name in sorted(os.listdir(solutions)):
        if name.endswith(".ipynb"):
            shutil.copy(os.path.join(solutions, name), student)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Grading throughput: make the measuring class, or print the "
        "figures recorded in book/data/grading_throughput.json."
    )
    parser.add_argument(
        "--class-dir", help="write a one-student class of the 11 solutions here and stop"
    )
    parser.add_argument("--data", default=DATA)
    args = parser.parse_args(argv)
    if args.class_dir:
        print(make_class(args.class_dir))
        return 0
    print(json.dumps(summary(args.data), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
