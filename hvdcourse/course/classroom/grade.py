"""Grade collected notebooks with ``hvdcourse-grade`` and merge the results into the gradebook
(lesson: Instructor guide).

Every run grades a fresh folder (``grading/<time>/submissions``, a copy of the notebooks chosen) into
its own results folder, then merges: only the (learner, exercise) pairs graded in this run change, so
re-grading one late learner or one exercise leaves every other row as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from hvdcourse.course.classroom import gradebook, layout
from hvdcourse.runtime.errors import RunFailed, UsageError

NOT_SUBMITTED = "not submitted"


def choose(course, book: dict, users: list, exercises: list, again: bool) -> tuple:
    """([(user, exercise, record)] to grade, [(user, exercise)] that submitted nothing). A notebook
    already graded as it is now is skipped unless ``again``."""
    records = course.read(course.collected_file, {})
    if not records:
        raise UsageError(
            f"nothing was collected in {course.root} yet: run 'hvdcourse-class collect EXERCISE' first"
        )
    unknown = [ex for ex in exercises if ex not in records]
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)} was never collected: run 'hvdcourse-class collect {unknown[0]}' first"
        )
    todo, missing = [], []
    for exercise in exercises or sorted(records):
        for user in users:
            record = records[exercise]["learners"].get(user, {})
            path = os.path.join(course.root, record.get("notebook", "-"))
            if record.get("status") != "collected" or not os.path.isfile(path):
                if "notebook" not in record:
                    missing.append((user, exercise))
                continue
            done = book["learners"].get(user, {}).get(exercise, {}).get("auto", {})
            if again or done.get("sha256") != record.get("sha256"):
                todo.append((user, exercise, record))
    return todo, missing


def run_grader(course, todo: list, options: list) -> str:
    """Copy the chosen notebooks to a fresh run folder, grade them there; returns the run folder."""
    moment = layout.now()
    run = os.path.join(course.grading, layout.stamp(moment))
    n = 1
    while os.path.exists(run):
        n += 1
        run = os.path.join(course.grading, f"{layout.stamp(moment)}-{n}")
    stage = os.path.join(run, "submissions")
    for user, exercise, record in todo:
        os.makedirs(os.path.join(stage, user), exist_ok=True)
        shutil.copy2(
            os.path.join(course.root, record["notebook"]),
            os.path.join(stage, user, exercise + ".ipynb"),
        )
    out = os.path.join(run, "results")
    # the notebooks may read nothing of the course folder: the other learners' notebooks, the gradebook
    cmd = [sys.executable, "-m", "hvdcourse.course.grading.grader", stage, "--out", out]
    cmd += ["--deny", course.root, *options]
    print(f"grading {len(todo)} notebook(s) into {out}", flush=True)
    code = subprocess.run(cmd).returncode
    if code != 0 or not os.path.isfile(os.path.join(out, "results.json")):
        raise RunFailed(
            f"the grader failed (exit code {code}; its output is above); the gradebook is unchanged, "
            f"the run is in {run}"
        )
    return run


def exercise_feedback(user: str, exercise: str, notebook: dict) -> tuple:
    """(points, max, feedback text) of one graded notebook, for its exercise only."""
    from hvdcourse.course.exercises.checks import EXERCISES
    from hvdcourse.course.grading import report as reporting

    ex_id = exercise.split("_", 1)[0]
    titles = {ex_id: EXERCISES[ex_id].title}
    maxima = reporting.max_points(titles)
    report = {k: v for k, v in notebook.items() if k != "name"}
    student = {"name": user, "notebooks": [{"name": notebook["name"], "report": report}]}
    student["scores"] = reporting.exercise_scores(student, titles)
    result = student["scores"][ex_id][0]
    text = reporting.feedback(student, titles, maxima)
    return (result.score if result else 0), maxima[ex_id], text


def merge(course, book: dict, run: str, todo: list, missing: list) -> list:
    """Merge the run's results into ``book`` (only the pairs it graded, and the learners who submitted
    nothing and have no entry yet); writes the feedback files; returns the lines to print."""
    results = {}
    if run is not None:
        with open(os.path.join(run, "results", "results.json"), encoding="utf-8") as fh:
            results = {s["student"]: s["notebooks"] for s in json.load(fh)}
    when, lines = layout.now().isoformat(), []
    for user, exercise, record in todo:
        notebook = next(
            (nb for nb in results.get(user, []) if nb["name"] == exercise + ".ipynb"), None
        )
        if notebook is None:
            lines.append(f"{user} {exercise}: not in the grader's results (see {run})")
            continue
        score, most, text = exercise_feedback(user, exercise, notebook)
        path = course.feedback_file(user, exercise)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        gradebook.entry(book, user, exercise)["auto"] = {
            "points": score,
            "max": most,
            "status": notebook.get("status", "?"),
            "late": record.get("late"),
            "sha256": record.get("sha256"),
            "graded_at": when,
            "run": os.path.relpath(run, course.root),
        }
        late = " (late)" if record.get("late") else ""
        lines.append(f"{user} {exercise}: {score:g}/{most:g} {notebook.get('status')}{late}")
    for user, exercise in missing:
        item = gradebook.entry(book, user, exercise)
        if "auto" in item:
            continue
        item["auto"] = {"points": 0, "status": NOT_SUBMITTED, "graded_at": when}
        path = course.feedback_file(user, exercise)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(
                f"# Feedback for {user}\n\nNo notebook of {exercise} was collected from you: 0 points.\n"
            )
        lines.append(f"{user} {exercise}: {NOT_SUBMITTED}, 0 points")
    return lines


def grade(course, users: list, exercises: list, options: list, again: bool = False) -> int:
    """Grade what was collected for ``users`` and ``exercises`` (all collected exercises when empty),
    merging into the gradebook; returns 0."""
    book = gradebook.load(course)
    todo, missing = choose(course, book, users, exercises, again)
    if not todo and not any("auto" not in gradebook.entry(book, u, e) for u, e in missing):
        print(
            "nothing new to grade: every collected notebook is graded as it is (--again grades anew)"
        )
        return 0
    run = run_grader(course, todo, options) if todo else None
    for line in merge(course, book, run, todo, missing):
        print(line, flush=True)
    course.write(course.gradebook_file, book)
    print(f"merged into {course.gradebook_file}", flush=True)
    return 0
