"""A whole class through one round on the class hub: 30 roster accounts from release to returned
feedback, timed (lesson: Instructor guide).

    python -m hvdcourse.course.hub.class_round [--learners 30] [--jobs auto] [--no-slurm]
                                               [--record book/data/class_round.json]

As root. Starts a hub of its own for ``--learners`` new accounts (``hvdclass01``...: their homes,
their copies of the lessons, the answer keys closed, as ``make hub`` does), then runs
``hvdcourse-class`` as an instructor would: ``release`` exercise 2 into every home; every learner
saves their notebook as themselves (most a right answer, some a constant, some the untouched
placeholder, some after the deadline, one a file that is not a notebook, one nothing); ``collect``
with the deadline, ``grade --jobs`` (the course's grader, each notebook in its sandbox with its
2-rank check), ``return``, ``export``. It then checks what each learner got back: the points their
answer earned, the late flags, "not submitted" and "could not be read" where they belong, each
feedback file owned by its learner and closed to the others (a learner's attempt to read another's
feedback fails, and so does their attempt to read the exercise's answer key). Then it grades the collected notebooks again on the local Slurm cluster
(:func:`grade_per_node`: on one node, then on two) and checks the scores are the local ones. It
fails, and writes no record, unless all of that holds. The times of each step,
with the machine and the load, go to the record the instructor guide reads (:func:`summary`;
tests/hub/test_class_round.py checks the committed one). The browser side of a round (learners
logging in, running the check, reading their feedback) is tested with 3 learners in
tests/hub/test_class_hub.py.
"""

from __future__ import annotations

import argparse
import base64
import collections
import csv
import datetime
import glob
import json
import os
import subprocess
import sys
import time

from hvdcourse.course.classroom import cli as class_cli
from hvdcourse.course.classroom import layout, roster
from hvdcourse.course.grading.report import max_points
from hvdcourse.course.hub import scale
from hvdcourse.course.services.slurm_cluster import NODES, LocalCluster
from hvdcourse.runtime import machine
from hvdcourse.runtime.errors import RunFailed, UsageError, run_cli
from hvdcourse.runtime.paths import ROOT

DATA = os.path.join(ROOT, "book", "data", "class_round.json")
LEARNERS = 30
EXERCISE = "ex02_global_mean"
ANSWER_CELL = 1  # the notebook's cell with global_mean
NOTHING = (
    f"No notebook of {EXERCISE} was collected from you"  # the feedback of who handed in nothing
)
CONSTANT = """import numpy as np

from hvdcourse.course.exercises import checks


def global_mean(hvd, local_values):
    return 2.5
"""
# what the learners hand in, in this order, the rest "right": (kind, how many)
KINDS = (("constant", 3), ("untouched", 3), ("late", 2), ("unreadable", 1), ("missing", 1))
FIELDS = (
    "date",
    "machine",
    "load_average_before",
    "load_average_after",
    "learners",
    "exercise",
    "jobs",
    "kinds",
    "seconds",
    "points",
    "full_points",
    "late_flagged",
    "not_submitted",
    "unreadable",
    "feedback_returned",
    "feedback_closed_to_others",
    "answer_key_closed_to",
    "slurm_grade_s",
    "slurm_same_scores",
)
SLURM_WAIT = 1800  # seconds the Slurm array may take before it is cancelled


def cast(names: list) -> dict:
    """Each learner's kind of hand-in (:data:`KINDS`, then "right" for the rest)."""
    kinds = [kind for kind, count in KINDS for _ in range(count)]
    if len(names) < len(kinds) + 2:
        raise UsageError(
            f"--learners must be at least {len(kinds) + 2}: every kind of hand-in, "
            "and two right answers"
        )
    return {name: (kinds[i] if i < len(kinds) else "right") for i, name in enumerate(names)}


def _answer_source(kind: str) -> str | None:
    if kind == "constant":
        return CONSTANT
    if kind in ("right", "late"):  # the instructor's solution (read as root: learners cannot)
        with open(os.path.join(ROOT, "solutions", f"{EXERCISE}.ipynb"), encoding="utf-8") as fh:
            return "".join(json.load(fh)["cells"][ANSWER_CELL]["source"])
    return None  # the placeholder stays


def _write_as(learner, path: str, data: bytes) -> None:
    roster.as_learner(learner, roster.replace_file, path, base64.b64encode(data).decode(), 0o600)


def hand_in(learner, path: str, kind: str) -> None:
    """Save ``learner``'s notebook as they would (as their own user): ``kind`` says what is in it."""
    if kind == "missing":
        roster.as_learner(learner, os.remove, path)
        return
    if kind == "unreadable":
        _write_as(learner, path, b'{"cells": [ {"cell_type": "code", "sour')  # a save cut short
        return
    with open(path, encoding="utf-8") as fh:
        notebook = json.load(fh)
    source = _answer_source(kind)
    if source is not None:
        notebook["cells"][ANSWER_CELL]["source"] = source
    _write_as(learner, path, (json.dumps(notebook, indent=1) + "\n").encode())


def _can_read_as(learner, path: str) -> bool:
    try:
        roster.as_learner(learner, roster.read_file, path, 10**6)
    except roster.LearnerFileError:
        return False
    return True


def _timed(seconds: dict, step: str, argv: list, say) -> None:
    began = time.monotonic()
    class_cli.run_class(argv)
    seconds[step] = round(time.monotonic() - began, 1)
    say(f"[class] {step}: {seconds[step]:.1f} s")


def round_trip(trial, jobs: str = "auto", slurm: bool = True, say=print) -> dict:
    """Release, hand in, collect, grade, return and export for the learners of ``trial`` (a
    :class:`scale.TrialHub`); check what came back; with ``slurm``, :func:`grade_per_node`; the
    figures."""
    names, homes = trial.names, trial.homes
    course = os.path.join(trial.base, "course")
    os.makedirs(course, mode=0o700)
    common = ["--course", course, "--roster", trial.roster, "--homes", homes]
    kinds = cast(names)
    learners = {ln.name: ln for ln in roster.learners(names, homes)}
    notebook = {n: os.path.join(homes, n, "exercises", f"{EXERCISE}.ipynb") for n in names}
    load_before = machine.load_average()
    seconds: dict = {}
    began = time.monotonic()
    _timed(seconds, "release", ["release", "ex02", *common], say)
    mark = time.monotonic()
    for name in names:
        if kinds[name] != "late":
            hand_in(learners[name], notebook[name], kinds[name])
    time.sleep(1.1)  # the deadline falls after every on-time save, to the second
    deadline = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    time.sleep(1.1)
    for name in names:
        if kinds[name] == "late":
            hand_in(learners[name], notebook[name], kinds[name])
    seconds["hand_in"] = round(time.monotonic() - mark - 2.2, 1)
    _timed(seconds, "collect", ["collect", "ex02", "--deadline", deadline, *common], say)
    _timed(seconds, "grade", ["grade", "ex02", "--jobs", jobs, *common], say)
    _timed(seconds, "return", ["return", "ex02", *common], say)
    _timed(seconds, "export", ["export", *common], say)
    seconds["all"] = round(time.monotonic() - began, 1)
    on_slurm = grade_per_node(course, trial.base, say) if slurm else {}
    return {
        **on_slurm,
        **scale.stamp(),
        "load_average_before": load_before,
        "load_average_after": machine.load_average(),
        "learners": len(names),
        "exercise": EXERCISE,
        "jobs": jobs,
        "kinds": dict(collections.Counter(kinds.values())),
        "seconds": seconds,
        **judge_outcome(course, learners, kinds),
    }


def _scores(results: str) -> dict:
    """{learner: their points per exercise, total and max} of a grader's ``scores.csv``."""
    with open(os.path.join(results, "scores.csv"), encoding="utf-8") as fh:
        return {
            row["student"]: {k: v for k, v in row.items() if k != "problems"}
            for row in csv.DictReader(fh)
        }


def _local_results(course: str) -> str:
    """The results folder of the class's last ``hvdcourse-class grade``."""
    return sorted(glob.glob(os.path.join(layout.Course(course).grading, "*", "results")))[-1]


def grade_per_node(course: str, base: str, say=print) -> dict:
    """The collected notebooks graded again on the local Slurm cluster (``hvdcourse-grade --slurm``:
    one array task per learner), on one node, then on both: the time each took, and whether the
    scores equal the local grading's. Both nodes are this machine (one CPU each), so the second
    node adds one CPU, as a second machine of one core would."""
    expected = _scores(_local_results(course))
    submitted = layout.Course(course).submitted  # the folder hvdcourse-class collect fills
    cluster = LocalCluster(os.path.join(base, "slurm"))
    seconds, same = {}, True
    try:
        cluster.start(timeout=120)
        for nodes in (1, 2):
            out = os.path.join(base, f"slurm-{nodes}")
            pin = [f"--sbatch=--nodelist={NODES[0]}"] if nodes == 1 else []
            began = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "hvdcourse.course.grading.grader", submitted]
                + ["--out", out, "--slurm", "--slurm-wait", str(SLURM_WAIT), *pin],
                env=cluster.env(),
                capture_output=True,
                text=True,
                timeout=SLURM_WAIT + 120,
            )
            seconds[str(nodes)] = round(time.monotonic() - began, 1)
            if proc.returncode not in (0, 1):  # 1: some notebook lost points
                raise RunFailed(
                    f"grading on {nodes} Slurm node(s) failed: {(proc.stderr or proc.stdout)[-800:]}"
                )
            same = same and _scores(out) == expected
            say(f"[class] grade on {nodes} Slurm node(s): {seconds[str(nodes)]:.1f} s")
    finally:
        cluster.stop(quiet=True, remove=True)
    if not same:
        raise RunFailed("grading on the Slurm cluster gave other scores than grading locally")
    return {"slurm_grade_s": seconds, "slurm_same_scores": same}


def judge_outcome(course: str, learners: dict, kinds: dict) -> dict:
    """What the class got back, checked against what each learner handed in; raises
    :class:`RunFailed` naming the first learner whose outcome is wrong."""
    with open(os.path.join(course, "scores.csv"), encoding="utf-8") as fh:
        rows = {row["username"]: row for row in csv.DictReader(fh)}
    column = next(k for k in next(iter(rows.values())) if k.startswith(EXERCISE[:4]))
    with open(os.path.join(course, "collected.json"), encoding="utf-8") as fh:
        collected = json.load(fh)[EXERCISE]
    points = {n: float(rows[n][column] or 0) for n in learners}
    ex_id = EXERCISE.split("_", 1)[0]
    full = float(max_points({ex_id: None})[ex_id])  # the exercise's points, from its check
    problems, feedback, closed = [], {}, 0
    for name, learner in learners.items():
        kind, got = kinds[name], points[name]
        record = collected["learners"].get(name, {})
        path = os.path.join(learner.home, "feedback", f"{EXERCISE}.md")
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        feedback[name] = text
        expected_late = kind == "late"
        if kind in ("right", "late") and got != full:
            problems.append(f"{name} ({kind}): {got} of {full} points")
        if kind in ("constant", "untouched", "unreadable", "missing") and got > full / 4:
            problems.append(f"{name} ({kind}): {got} points, more than a quarter of {full}")
        if kind != "missing" and bool(record.get("late")) != expected_late:
            problems.append(f"{name} ({kind}): late flag {record.get('late')}")
        if kind == "missing" and NOTHING not in text:
            problems.append(f"{name} (missing): the feedback does not say {NOTHING!r}")
        if kind == "unreadable" and "could not be read" not in text:
            problems.append(f"{name} (unreadable): the feedback does not say it could not be read")
        if not text or os.stat(path).st_uid != learner.uid or os.stat(path).st_mode & 0o077:
            problems.append(f"{name}: feedback missing, not theirs, or open to others ({path})")
    names = list(learners)
    for i, name in enumerate(names):  # each learner tries the next one's feedback
        other = learners[names[(i + 1) % len(names)]]
        if _can_read_as(learners[name], os.path.join(other.home, "feedback", f"{EXERCISE}.md")):
            problems.append(f"{name} can read {other.name}'s feedback")
        else:
            closed += 1
    key = os.path.join(ROOT, "solutions", f"{EXERCISE}.ipynb")
    keys_closed = sum(not _can_read_as(learner, key) for learner in learners.values())
    if keys_closed != len(learners):
        problems.append(f"{len(learners) - keys_closed} learner(s) can read the answer key {key}")
    if full <= 0:
        problems.insert(0, f"{EXERCISE} is worth no point: the grader did not run its checks")
    if problems:
        raise RunFailed(
            f"{len(problems)} wrong outcome(s) of the class round: " + "; ".join(problems[:6])
        )
    return {
        "points": {
            kind: sorted(points[n] for n in names if kinds[n] == kind)
            for kind in set(kinds.values())
        },
        "full_points": full,
        "late_flagged": sorted(n for n in names if collected["learners"].get(n, {}).get("late")),
        "not_submitted": sorted(n for n in names if NOTHING in feedback[n]),
        "unreadable": sorted(n for n in names if "could not be read" in feedback[n]),
        "feedback_returned": sum(bool(t) for t in feedback.values()),
        "feedback_closed_to_others": closed,
        "answer_key_closed_to": keys_closed,
    }


def write_record(record: dict, path: str) -> None:
    """Write ``record`` (every field of :data:`FIELDS`, no other) to ``path``."""
    scale.write_fields(record, FIELDS, path)


def summary(path: str = DATA) -> dict:
    """The record's figures for the instructor guide."""
    with open(path, encoding="utf-8") as fh:
        record = json.load(fh)
    graded = record["learners"] - record["kinds"].get("missing", 0)
    return {
        **record,
        "day": record["date"][:10],
        "load": record["load_average_before"][0],
        "load_after": record["load_average_after"][0],  # (the round's own processes count in it)
        "loaded": record["load_average_before"][0] > record["machine"]["cores"],
        "graded": graded,
        "grade_per_notebook_s": record["seconds"]["grade"] / graded,
        "slurm_speedup": record["slurm_grade_s"]["1"] / record["slurm_grade_s"]["2"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.hub.class_round",
        description="Take a class of new accounts through release, collect, grade and return.",
    )
    parser.add_argument("--learners", type=int, default=LEARNERS, help=f"default {LEARNERS}")
    parser.add_argument(
        "--jobs", default="auto", help="the grader's notebooks at once (default auto)"
    )
    parser.add_argument(
        "--no-slurm",
        action="store_true",
        help="skip grading again on the local Slurm cluster's 1 and 2 nodes (no record then)",
    )
    parser.add_argument("--record", default=None, help=f"write the figures here (e.g. {DATA})")
    args = parser.parse_args(argv)
    if not 1 <= args.learners <= 99:
        raise UsageError("--learners must be 1-99")
    if args.record and args.no_slurm:
        raise UsageError("--record needs the Slurm grading: leave out --no-slurm")
    cast([f"x{i}" for i in range(args.learners)])  # too few learners: say so before any account
    with scale.temporary_hub(args.learners, scale.IDLE_TIMEOUT, prefix="hvdclass") as trial:
        record = round_trip(trial, args.jobs, slurm=not args.no_slurm)
    print(json.dumps(record, indent=1))
    if args.record:
        write_record(record, args.record)
        print(f"[class] wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
