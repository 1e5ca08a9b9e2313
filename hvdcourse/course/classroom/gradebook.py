"""The class's gradebook: one file of points, merged run by run, with the marks given by hand
(lesson: Instructor guide).

``gradebook.json``: ``{"learners": {user: {exercise: {"auto": {...}, "manual": {question: {...}}}}}}``.
A grader run replaces only the ``auto`` part of the (learner, exercise) pairs it graded; a manual mark
replaces only its own question. An exercise's points are its automatic points plus its manual marks.
"""

from __future__ import annotations

import csv
import os

from hvdcourse.course.classroom import layout
from hvdcourse.runtime.errors import UsageError


def load(course) -> dict:
    book = course.read(course.gradebook_file, {})
    book.setdefault("learners", {})
    return book


def entry(book: dict, user: str, exercise: str) -> dict:
    return book["learners"].setdefault(user, {}).setdefault(exercise, {})


def points(item: dict) -> float:
    """The points of one (learner, exercise): automatic plus manual."""
    manual = sum(m["points"] for m in item.get("manual", {}).values())
    return item.get("auto", {}).get("points", 0) + manual


def exercises_of(book: dict) -> list:
    return sorted({ex for per in book["learners"].values() for ex in per})


def mark(book: dict, user: str, exercise: str, question: str, value: float, note: str = "") -> None:
    """Set the manual mark of ``user``'s answer to ``question`` of ``exercise`` (replaces an earlier one)."""
    entry(book, user, exercise).setdefault("manual", {})[question] = {
        "points": value,
        "note": note,
        "marked_at": layout.now().isoformat(),
    }


def parse_points(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise UsageError(f"{where}: points {text!r} is not a number >= 0")
    return value


def read_marks(path: str, users: list, resolve) -> list:
    """[(user, exercise, question, points, note)] from a CSV with the columns username, exercise,
    points and optionally question and note (rows with empty points are skipped). Every row is
    checked before any is used."""
    if not os.path.isfile(path):
        raise UsageError(f"no marks file at {path}")
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    needed = {"username", "exercise", "points"}
    if not rows or not needed <= set(rows[0]):
        raise UsageError(
            f"{path} needs a header with the columns username, exercise, points (and optionally "
            "question, note)"
        )
    marks = []
    for number, row in enumerate(rows, 2):
        if not (row.get("points") or "").strip():
            continue
        where = f"{path}, line {number}"
        user = row["username"].strip()
        if user not in users:
            raise UsageError(f"{where}: unknown learner {user!r}: not on the roster")
        marks.append(
            (
                user,
                resolve(row["exercise"].strip()),
                (row.get("question") or "").strip() or "q1",
                parse_points(row["points"].strip(), where),
                (row.get("note") or "").strip(),
            )
        )
    return marks


def export(book: dict, users: list, path: str) -> list:
    """Write the scores as a CSV a learning-management system imports: one row per learner (the roster's
    order, then anyone else in the gradebook), one column per exercise, then the total. An exercise not
    graded for a learner is left empty. Returns the exercise columns."""
    columns = exercises_of(book)
    everyone = list(users) + sorted(set(book["learners"]) - set(users))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["username", *columns, "total"])
        for user in everyone:
            per = book["learners"].get(user, {})
            cells = [f"{points(per[ex]):g}" if ex in per else "" for ex in columns]
            total = sum(points(item) for item in per.values())
            writer.writerow([user, *cells, f"{total:g}"])
    return columns


def manual_section(item: dict) -> str:
    """The feedback lines of the manual marks of one (learner, exercise), '' when there are none."""
    manual = item.get("manual", {})
    if not manual:
        return ""
    lines = ["", "## Written answers, marked by hand", ""]
    for question, mark_ in sorted(manual.items()):
        note = f": {mark_['note']}" if mark_.get("note") else ""
        lines.append(f"- Question {question.lstrip('q')}: {mark_['points']:g} point(s){note}")
    lines += ["", f"**Total for this exercise, with the marks by hand: {points(item):g} points.**"]
    return "\n".join(lines) + "\n"


def feedback(course, book: dict, user: str, exercise: str):
    """The feedback to return to ``user`` for ``exercise``: the grader's, then the marks by hand (None
    when the exercise was not graded for them)."""
    item = book["learners"].get(user, {}).get(exercise)
    path = course.feedback_file(user, exercise)
    if item is None or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return fh.read() + manual_section(item)
