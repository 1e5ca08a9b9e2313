"""The course's lessons, their planned times and measured execution times (intro, instructor guide).

The execution times of the day plans and of the intro's table are reference figures, not this
build's: ``book/data/execution_times.json``, written by ``python -m hvdcourse.course.book.book_build
--record-times`` from myst-nb's execution data of a build that executed every page, and naming the
machine and the date (the pages print them). A page's time in this build is shown by the
``{execution-time}`` role and the instructor guide's ``{nb-exec-table}`` (hvdcourse.course.book.sphinx_ext).
"""

from __future__ import annotations

import math
import json
import os
import re

import yaml

from hvdcourse.runtime.paths import BOOK_DATA, ROOT

TIMES = os.path.join(BOOK_DATA, "execution_times.json")  # the recorded reference times
_TIME_LINE = re.compile(r"\*\*Time\*\*:\s*teaching\s+(\d+)\s*min(?:,\s*exercises\s+(\d+)\s*min)?")


def lessons() -> list:
    """(file, title, teaching minutes, exercise minutes) for every lesson in ``_toc.yml``."""
    toc = yaml.safe_load(open(os.path.join(ROOT, "_toc.yml")))
    rows = []
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            name = chapter["file"]
            if not name.startswith("notebooks/"):
                continue
            text = open(os.path.join(ROOT, name + ".md")).read()
            title = re.search(r"^# (.+)$", text, re.M).group(1).strip()
            timing = _TIME_LINE.search(text)
            teach, practise = (
                (int(timing.group(1)), int(timing.group(2) or 0)) if timing else (None, None)
            )
            rows.append(
                {
                    "lesson": os.path.basename(name),
                    "title": title,
                    "part": part["caption"],
                    "teaching_min": teach,
                    "exercises_min": practise,
                }
            )
    return rows


def lesson_number(name: str):
    """The number of a lesson's file: 5 for ``05_conversion`` or ``notebooks/05_conversion``; the book
    shows it before the lesson's title (hvdcourse.course.book.sphinx_ext). None for another name."""
    found = re.fullmatch(r"(?:notebooks/)?(\d\d)_\w+", name)
    return int(found.group(1)) if found else None


def timing_table():
    """A DataFrame of the lessons with planned minutes and the last recorded execution seconds."""
    import pandas as pd

    table = pd.DataFrame(lessons())
    recorded = json.load(open(TIMES)) if os.path.isfile(TIMES) else {"lessons": {}}
    table["executes_in_s"] = [recorded["lessons"].get(name) for name in table["lesson"]]
    table.attrs["recorded"] = {k: v for k, v in recorded.items() if k != "lessons"}
    return table


# ------------------------------------------------------------------------------------ day plans

EXERCISE_SOURCES = os.path.join(ROOT, "exercises", "source")
_EXERCISE_TIME = re.compile(r"Time:\s*(\d+)\s*minutes")
_EXERCISE_LINK = re.compile(r"exercises/(ex\d\d_\w+)\.ipynb")
# an exercise whose source's opening line (``*Lesson: ... (advanced) ...*``) marks it advanced
_ADVANCED = re.compile(r"^\*Lesson:[^\n]*\(advanced\)", re.M)
# Lessons an instructor can drop from a one-day course, first dropped first: each stands on its own
# and works as self-study; no later lesson needs them. Lessons 01-08 build on each other; 12, 13, 14,
# 15 and 16 sit among them (after the lessons they need) but none of 01-08 needs them. In this order the
# two-day plan leaves them out when not all lessons fit.
DROPPABLE = (
    "11_monitoring",
    "14_beyond_horovod",
    "16_install",
    "12_data_parallel_at_scale",
    "13_model_parallelism",
    "10_fault_tolerance",
    "15_ray_train",
    "09_pytorch",
)
# A teaching day: 09:00 to 17:30 with a 15-minute break in the morning and in the afternoon and an
# hour for lunch, each taken at the first lesson boundary after the time given.
DAY = {
    "start": 9 * 60,
    "end": 17 * 60 + 30,
    "pauses": ((10 * 60 + 15, "break", 15), (12 * 60 + 15, "lunch", 60), (15 * 60, "break", 15)),
}


_AFTER = re.compile(r"[Aa]fter \{ref\}`([\w-]+)`")
_LABEL = re.compile(r"^\(([\w-]+)\)=$", re.M)


def graded_exercises() -> dict:
    """{lesson: [(exercise, minutes), ...]}: each graded notebook under the first lesson that links it,
    or, when the line of that link says "after {ref}`label`", under the lesson with that label; with
    the time its source states ("Time: N minutes")."""
    planned = {}
    for name in sorted(os.listdir(EXERCISE_SOURCES)):
        if name.endswith(".md"):
            found = _EXERCISE_TIME.search(open(os.path.join(EXERCISE_SOURCES, name)).read())
            planned[name[:-3]] = int(found.group(1)) if found else 0
    texts = {
        row["lesson"]: open(os.path.join(ROOT, "notebooks", row["lesson"] + ".md")).read()
        for row in lessons()
    }
    by_label = {label: lesson for lesson, text in texts.items() for label in _LABEL.findall(text)}
    where = {}
    for lesson, text in texts.items():
        for line in text.splitlines():
            after = _AFTER.search(line)
            for exercise in _EXERCISE_LINK.findall(line):
                if exercise in planned and exercise not in where:
                    where[exercise] = by_label.get(after.group(1), lesson) if after else lesson
    result = {}
    for lesson in texts:  # in course order
        for exercise in sorted(e for e, at in where.items() if at == lesson):
            result.setdefault(lesson, []).append((exercise, planned[exercise]))
    return result


def advanced_exercises() -> set:
    """The graded exercises whose source marks them "(advanced)" in its opening line: homework in
    every plan (like the Carpentries' optional exercises), never class time."""
    return {
        name[:-3]
        for name in sorted(os.listdir(EXERCISE_SOURCES))
        if name.endswith(".md")
        and _ADVANCED.search(open(os.path.join(EXERCISE_SOURCES, name)).read())
    }


def lesson_blocks(graded: bool = True, drop=(), homework=()) -> list:
    """Minutes per lesson: teaching, the page's exercises, the live demo (the page's measured execution
    time, rounded up to whole minutes) and, if ``graded``, its graded exercise notebooks (but for the
    advanced ones, :func:`advanced_exercises`, and those of the lessons in ``homework``, which
    learners do after class)."""
    recorded = json.load(open(TIMES))["lessons"] if os.path.isfile(TIMES) else {}
    notebooks = graded_exercises() if graded else {}
    advanced = advanced_exercises() if graded else set()
    blocks = []
    for row in lessons():
        if row["lesson"] in drop:
            continue
        seconds = recorded.get(row["lesson"])
        demo = math.ceil(seconds / 60) if seconds else 0  # whole minutes, rounded up
        in_class = [] if row["lesson"] in homework else notebooks.get(row["lesson"], [])
        extra = sum(minutes for name, minutes in in_class if name not in advanced)
        blocks.append(
            {
                **row,
                "demo_min": demo,
                "graded_min": extra,
                "total_min": (row["teaching_min"] or 0)
                + (row["exercises_min"] or 0)
                + demo
                + extra,
            }
        )
    return blocks


def clock(minutes: int) -> str:
    """The clock time HH:MM of ``minutes`` after midnight (the plans' start and end times)."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def day_plan(days: int, graded: bool = True, drop=(), homework=()):
    """A schedule of the lessons over ``days`` teaching days (:data:`DAY`), as a DataFrame with one row
    per lesson or pause. A lesson that does not fit in what is left of a day starts the next day.
    Raises ValueError when the lessons do not fit in ``days`` days."""
    import pandas as pd

    rows, day, now, pauses = [], 1, DAY["start"], list(DAY["pauses"])
    for block in lesson_blocks(graded=graded, drop=drop, homework=homework):
        if now + block["total_min"] + sum(p[2] for p in pauses) > DAY["end"]:
            day, now, pauses = day + 1, DAY["start"], list(DAY["pauses"])
            if day > days:
                raise ValueError(
                    f"the lessons do not fit in {days} day(s) of {clock(DAY['start'])}-"
                    f"{clock(DAY['end'])}: drop lessons (course_map.DROPPABLE) or their graded exercises"
                )
        # a pause comes before a lesson that would run well past its time (or when its time has come)
        if pauses and (
            now >= pauses[0][0]
            or (now >= pauses[0][0] - 45 and now + block["total_min"] > pauses[0][0] + 20)
        ):
            _, what, length = pauses.pop(0)
            rows.append(
                {
                    "day": day,
                    "starts": clock(now),
                    "lesson": f"({what})",
                    "ends": clock(now + length),
                }
            )
            now += length
        rows.append(
            {
                "day": day,
                "starts": clock(now),
                "lesson": block["title"],
                "teaching": block["teaching_min"],
                "exercises": block["exercises_min"],
                "demo runs": block["demo_min"],
                "graded exercises": block["graded_min"],
                "ends": clock(now + block["total_min"]),
            }
        )
        now += block["total_min"]
    return pd.DataFrame(rows)


def one_day_plan():
    """The one-day course: every lesson but :data:`DROPPABLE`, the graded notebooks as homework."""
    return day_plan(1, graded=False, drop=DROPPABLE)


def two_day_plan():
    """The two-day course: every lesson that fits, with its page's exercises and its graded notebooks
    (the advanced ones, :func:`advanced_exercises`, as homework).

    The self-study lessons (:data:`DROPPABLE`) that are taught have their graded notebooks as
    homework; when the lessons do not all fit, self-study lessons are left out in the order of
    :data:`DROPPABLE` until the rest fits. ``plan.attrs["self_study"]`` lists those left out.
    """
    for count in range(len(DROPPABLE) + 1):
        left_out = DROPPABLE[:count]
        try:
            plan = day_plan(2, graded=True, drop=left_out, homework=DROPPABLE)
        except ValueError:
            continue
        plan.attrs["self_study"] = list(left_out)
        return plan
    raise ValueError(
        "the lessons that cannot be dropped (all but course_map.DROPPABLE) do not fit in two days"
    )
