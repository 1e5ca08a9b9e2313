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
# Lessons an instructor can drop, first dropped first: each works as self-study, and the order is
# such that dropping a prefix never drops a prerequisite of a kept lesson (check_order): monitoring (11) needs fault tolerance (10); Ray Train (15) needs PyTorch (09),
# beyond Horovod (14, `train_mwms`) and fault tolerance (10). The one-day plan drops them all; the
# two-day plan drops them in this order until the rest fits.
DROPPABLE = (
    "11_monitoring",
    "16_install",
    "15_ray_train",
    "14_beyond_horovod",
    "12_data_parallel_at_scale",
    "13_model_parallelism",
    "10_fault_tolerance",
    "09_pytorch",
)
# One day cannot hold lessons 01-08 with a pause every 90 minutes (their minutes need lunch and three
# breaks, more than the day has). The one-day plan also leaves these to self-study, in this order,
# until the rest fits: no other lesson of 01-08 needs performance (07).
ONE_DAY_DROPPABLE = ("07_performance",)
# The learner's first own distributed run: in the exercises of Horovod's design (04) the learner
# writes Horovod calls and runs them on the 2 MPI ranks the page started (`%%px` engines: exercise
# Design-1 in the page; the check of graded exercise 2 runs the learner's function on 2 ranks).
# Lesson 03 runs the course's own ring on those engines before; lesson 05 is the first training
# script. Both plans must end this lesson's page (teaching and exercises) before lunch on day 1.
FIRST_OWN_RUN = "04_horovod_design"
# A teaching day: 09:00 to 17:30. Lunch (an hour) at the first block boundary after 12:00 once the
# first own run is done (or before a block that would end after 13:15), and a 15-minute break wherever the next block would make more than 90
# minutes without a pause. A lesson's graded notebooks are a block of their own, so that a pause can
# fall between the page and them.
DAY = {
    "start": 9 * 60,
    "end": 17 * 60 + 30,
    "lunch": (12 * 60, 60),
    "lunch_latest": 13 * 60 + 15,
    "break": 15,
    "max_stretch": 90,
}
# The second day opens with the 15-minute recap of day 1 (book/recap_day2.md): a row of the plan,
# "(recap of day 1)", whose minutes count as teaching (no pause before the first lesson of day 2).
RECAP = ("(recap of day 1)", 15)


# The tracks of the two-day plan. "keras", the default, follows the book. "pytorch", for a class that
# trains with PyTorch: the same days (foundations and the conversion on day 1, the tools on day 2), but
# the PyTorch lesson and its graded exercise (15) are taught right after the conversion lesson, and
# the graded exercises that drill Keras' own API (KERAS_ONLY_EXERCISES) are homework.
TRACKS = ("keras", "pytorch")
PYTORCH_LESSON = "09_pytorch"
# Keras-only: the learner writes a Keras script's Horovod lines (5: `compile`, `fit` and its
# callbacks), Keras callbacks (6: `LearningRateWarmupCallback`, 7: `MetricAverageCallback`,
# `ModelCheckpoint`) or names the bugs of a Keras script by its callbacks' arguments (11). The others
# practise Horovod's collectives, sharding, the timeline, scaling and Slurm, whatever the framework.
KERAS_ONLY_EXERCISES = (
    "ex05_conversion",
    "ex06_lr_warmup",
    "ex07_rank0_checkpoints",
    "ex11_find_the_bug",
)


def track_order(track: str = "keras") -> list:
    """The lessons in the order a track teaches them: the book's (``_toc.yml``), but for the PyTorch
    track, which moves :data:`PYTORCH_LESSON` right after the conversion lesson (05)."""
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}: choose one of {', '.join(TRACKS)}")
    order = [row["lesson"] for row in lessons()]
    if track == "pytorch":
        order.remove(PYTORCH_LESSON)
        order.insert(order.index("05_conversion") + 1, PYTORCH_LESSON)
    return order


class PlanDoesNotFit(ValueError):
    """The lessons do not fit in the days given (drop lessons: :data:`DROPPABLE`)."""


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
    texts = lesson_texts()
    by_label = labels()
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


def after_class_exercises(track: str = "keras") -> set:
    """The graded exercises that no plan of ``track`` teaches in class: the advanced ones and, in the
    PyTorch track, :data:`KERAS_ONLY_EXERCISES`."""
    return advanced_exercises() | (set(KERAS_ONLY_EXERCISES) if track == "pytorch" else set())


def lesson_blocks(graded: bool = True, drop=(), homework=(), track: str = "keras") -> list:
    """Minutes per lesson, in the ``track``'s order (:func:`track_order`): teaching, the page's
    exercises, the live demo (the page's measured execution time, rounded up to whole minutes) and,
    if ``graded``, its graded exercise notebooks (but for the advanced ones,
    :func:`advanced_exercises`, those of the lessons in ``homework``, and, in the PyTorch track,
    :data:`KERAS_ONLY_EXERCISES`, which learners do after class)."""
    recorded = json.load(open(TIMES))["lessons"] if os.path.isfile(TIMES) else {}
    notebooks = graded_exercises() if graded else {}
    after_class = after_class_exercises(track) if graded else set()
    by_name = {row["lesson"]: row for row in lessons()}
    blocks = []
    for row in (by_name[name] for name in track_order(track)):
        if row["lesson"] in drop:
            continue
        seconds = recorded.get(row["lesson"])
        demo = math.ceil(seconds / 60) if seconds else 0  # whole minutes, rounded up
        in_class = [] if row["lesson"] in homework else notebooks.get(row["lesson"], [])
        extra = sum(minutes for name, minutes in in_class if name not in after_class)
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


_PREREQUISITES = re.compile(r"^\*\*Prerequisites\*\*:(.*?)(?=\n\s*\n|\n\*\*\w|\n:::)", re.M | re.S)
_REF = re.compile(r"\{ref\}`(?:[^`<]*<)?([\w-]+)>?`")


def lesson_texts() -> dict:
    """{lesson: the text of its ``.md`` file}, in ``_toc.yml`` order."""
    return {
        row["lesson"]: open(os.path.join(ROOT, "notebooks", row["lesson"] + ".md")).read()
        for row in lessons()
    }


def prerequisite_labels(text: str):
    """The labels that a lesson's ``**Prerequisites**`` line (of its Overview) names with ``{ref}``,
    in order; None when the text has no such line."""
    found = _PREREQUISITES.search(text)
    return _REF.findall(found.group(1)) if found else None


def labels() -> dict:
    """{label: lesson} for every ``(label)=`` line of every lesson."""
    return {
        label: lesson for lesson, text in lesson_texts().items() for label in _LABEL.findall(text)
    }


def prerequisites() -> dict:
    """{lesson: [the lessons its Prerequisites line names, in the line's order]}; labels of pages
    that are not lessons (the setup page, say) are left out."""
    where = labels()
    return {
        lesson: [where[label] for label in prerequisite_labels(text) or () if label in where]
        for lesson, text in lesson_texts().items()
    }


def check_order(order, dropped=()) -> None:
    """Raise ValueError, naming the lesson and the prerequisite, unless every lesson in ``order``
    comes after each lesson its Prerequisites line names (``_toc.yml``'s order, or a plan's, whose
    ``dropped`` lessons are self-study)."""
    needs, seen = prerequisites(), set()
    for lesson in order:
        for needed in needs.get(lesson, ()):
            if needed not in seen:
                why = (
                    "which the plan drops (course_map.DROPPABLE: drop the later lesson first)"
                    if needed in dropped
                    else "which comes after it"
                    if needed in order
                    else "which is not in the course"
                )
                raise ValueError(f"{lesson} names {needed} as a prerequisite, {why}")
        seen.add(lesson)


def clock(minutes: int) -> str:
    """The clock time HH:MM of ``minutes`` after midnight (the plans' start and end times)."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def minutes_of(time: str) -> int:
    """Minutes after midnight of a clock time ``HH:MM`` (the inverse of :func:`clock`)."""
    hours, minutes = time.split(":")
    return int(hours) * 60 + int(minutes)


def _segments(blocks):
    """The plan's blocks: each lesson's page (teaching, exercises, demo), then its graded notebooks."""
    for block in blocks:
        page = block["total_min"] - block["graded_min"]
        yield block, "page", page
        if block["graded_min"]:
            yield block, "graded", block["graded_min"]


def day_plan(days: int, graded: bool = True, drop=(), homework=(), track: str = "keras"):
    """A schedule of the lessons over ``days`` teaching days (:data:`DAY`), as a DataFrame with one row
    per lesson or pause (a lesson's graded notebooks get a row of their own when a pause or the night
    falls between them and the page). A block that does not fit in what is left of a day starts the
    next day.

    ``track`` (:data:`TRACKS`) orders the lessons (:func:`track_order`) and picks the graded
    notebooks taught in class (:func:`lesson_blocks`).

    ``plan.attrs``: ``track``; ``lessons``, the lessons in plan order; ``first_own_run``, the day
    and the end of :data:`FIRST_OWN_RUN`'s page and the start of that day's lunch;
    ``longest_stretch_min``, the longest time taught without a pause. Raises :class:`PlanDoesNotFit` when the lessons do not fit
    in ``days`` days, and ValueError when the plan breaks a rule (:func:`check_plan`)."""
    import pandas as pd

    rows, day, now, stretch, lunched = [], 1, DAY["start"], 0, False
    lunch_at, lunch_min = DAY["lunch"]
    first_run = None  # (day, end) of the first own run
    previous = (
        None  # the row of the last block, to which its lesson's graded notebooks may be added
    )

    def pause(what, length):
        nonlocal now, stretch, previous
        rows.append(
            {"day": day, "starts": clock(now), "lesson": f"({what})", "ends": clock(now + length)}
        )
        now, stretch, previous = now + length, 0, None

    for block, kind, minutes in _segments(
        lesson_blocks(graded=graded, drop=drop, homework=homework, track=track)
    ):
        if minutes > DAY["max_stretch"]:
            raise ValueError(
                f"{block['lesson']}: its {kind} takes {minutes} min, more than the "
                f"{DAY['max_stretch']} min allowed without a pause (course_map.DAY): split it"
            )
        run_done = day > 1 or first_run is not None
        wants_lunch = (
            not lunched and now >= lunch_at and (run_done or now + minutes > DAY["lunch_latest"])
        )
        wants_break = not wants_lunch and stretch + minutes > DAY["max_stretch"]
        needed = minutes + (lunch_min if wants_lunch else DAY["break"] if wants_break else 0)
        if now + needed > DAY["end"]:
            day, now, stretch, lunched, previous = day + 1, DAY["start"], 0, False, None
            if day > days:
                raise PlanDoesNotFit(
                    f"the lessons do not fit in {days} day(s) of {clock(DAY['start'])}-"
                    f"{clock(DAY['end'])}: drop lessons (course_map.DROPPABLE) or their graded exercises"
                )
            if day == 2:
                recap, recap_min = RECAP
                rows.append(
                    {
                        "day": day,
                        "starts": clock(now),
                        "lesson": recap,
                        "teaching": recap_min,
                        "graded exercises": 0,
                        "ends": clock(now + recap_min),
                    }
                )
                now, stretch = now + recap_min, recap_min
        elif wants_lunch:
            pause("lunch", lunch_min)
            lunched = True
        elif wants_break:
            pause("break", DAY["break"])
        if kind == "graded" and previous is not None:  # right after its page: one row
            previous["graded exercises"] = minutes
            previous["ends"] = clock(now + minutes)
        else:
            previous = {
                "day": day,
                "starts": clock(now),
                "lesson": block["title"]
                if kind == "page"
                else f"{block['title']} (graded exercises)",
                "teaching": block["teaching_min"] if kind == "page" else None,
                "exercises": block["exercises_min"] if kind == "page" else None,
                "demo runs": block["demo_min"] if kind == "page" else None,
                "graded exercises": 0 if kind == "page" else minutes,
                "ends": clock(now + minutes),
            }
            rows.append(previous)
        now, stretch = now + minutes, stretch + minutes
        if kind == "page" and block["lesson"] == FIRST_OWN_RUN and first_run is None:
            first_run = (day, now)
    plan = pd.DataFrame(rows)
    plan.attrs["track"] = track
    plan.attrs["lessons"] = [lesson for lesson in track_order(track) if lesson not in drop]
    day_one_lunch = next(
        (r["starts"] for r in rows if r["day"] == 1 and r["lesson"] == "(lunch)"), None
    )
    plan.attrs["first_own_run"] = (
        {
            "lesson": FIRST_OWN_RUN,
            "day": first_run[0],
            "ends": clock(first_run[1]),
            "lunch": day_one_lunch,
        }
        if first_run
        else None
    )
    plan.attrs["longest_stretch_min"] = max(stretches(plan))
    check_plan(plan, drop=drop)
    return plan


def stretches(plan) -> list:
    """The minutes taught between two pauses (or a day's start and end) in a plan, in order."""
    found, day, start, end = [], None, None, None
    for row in plan.to_dict("records"):
        if row["day"] != day or row["lesson"] in ("(break)", "(lunch)"):
            if start is not None:
                found.append(end - start)
            start = None
            day = row["day"]
            if row["lesson"] in ("(break)", "(lunch)"):
                continue
        if start is None:
            start = minutes_of(row["starts"])
        end = minutes_of(row["ends"])
    if start is not None:
        found.append(end - start)
    return found


def check_plan(plan, drop=()) -> None:
    """Raise ValueError, saying which rule and where, unless: no more than ``DAY["max_stretch"]``
    minutes go by without a pause; the first own run (:data:`FIRST_OWN_RUN`) ends before lunch on
    day 1; every lesson of the plan comes after its prerequisites, none of which is dropped
    (:func:`check_order`)."""
    longest = max(stretches(plan))
    if longest > DAY["max_stretch"]:
        raise ValueError(
            f"the plan teaches {longest} min without a pause, more than {DAY['max_stretch']}: "
            "move a break (course_map.DAY) or split the longest lesson"
        )
    run = plan.attrs.get("first_own_run")
    if (
        run is None
        or run["day"] != 1
        or run["lunch"] is None
        or minutes_of(run["ends"]) > minutes_of(run["lunch"])
    ):
        where = (
            f"day {run['day']}, ends {run['ends']}, lunch {run['lunch']}"
            if run
            else "not in the plan"
        )
        raise ValueError(
            f"the first own distributed run ({FIRST_OWN_RUN}) must end before lunch on day 1 ({where}): "
            "shorten the morning (fewer graded exercises before it) or move lunch (course_map.DAY)"
        )
    check_order(plan.attrs["lessons"], dropped=drop)


def _first_plan_that_fits(days, graded, drop, droppable, homework, track="keras"):
    """The plan of ``days`` days without ``drop`` and the shortest prefix of ``droppable`` that lets
    the rest fit; ``plan.attrs["self_study"]`` lists every lesson left out."""
    for count in range(len(droppable) + 1):
        left_out = tuple(drop) + tuple(droppable[:count])
        try:
            plan = day_plan(days, graded=graded, drop=left_out, homework=homework, track=track)
        except PlanDoesNotFit:
            continue
        plan.attrs["self_study"] = list(left_out)
        return plan
    raise PlanDoesNotFit(
        f"the lessons that cannot be dropped do not fit in {days} day(s) "
        "(course_map.DROPPABLE, course_map.ONE_DAY_DROPPABLE)"
    )


def one_day_plan():
    """The one-day course: every lesson but :data:`DROPPABLE` (and, if the rest does not fit, but
    :data:`ONE_DAY_DROPPABLE`), the graded notebooks as homework. ``plan.attrs["self_study"]`` lists
    the lessons left out."""
    return _first_plan_that_fits(1, False, DROPPABLE, ONE_DAY_DROPPABLE, ())


def two_day_plan(track: str = "keras"):
    """The two-day course: every lesson that fits, with its page's exercises and its graded notebooks
    (the advanced ones, :func:`advanced_exercises`, as homework).

    The self-study lessons (:data:`DROPPABLE`) that are taught have their graded notebooks as
    homework; when the lessons do not all fit, self-study lessons are left out in the order of
    :data:`DROPPABLE` until the rest fits. ``plan.attrs["self_study"]`` lists those left out.

    ``track="pytorch"``: the same days for a class that trains with PyTorch: the PyTorch lesson
    (:data:`PYTORCH_LESSON`) right after the conversion lesson, never dropped, with its graded
    exercise in class; :data:`KERAS_ONLY_EXERCISES` are homework. ``plan.attrs["in_class"]`` and
    ``plan.attrs["homework"]`` list the graded exercises of the taught lessons, in plan order, done
    in class and after class.
    """
    if track not in TRACKS:
        raise ValueError(f"unknown track {track!r}: choose one of {', '.join(TRACKS)}")
    droppable = tuple(
        lesson for lesson in DROPPABLE if track == "keras" or lesson != PYTORCH_LESSON
    )
    plan = _first_plan_that_fits(2, True, (), droppable, droppable, track)
    graded = graded_exercises()
    taught = [
        (lesson, name) for lesson in plan.attrs["lessons"] for name, _ in graded.get(lesson, [])
    ]
    after_class = after_class_exercises(track)
    plan.attrs["in_class"] = [
        name for lesson, name in taught if lesson not in droppable and name not in after_class
    ]
    plan.attrs["homework"] = [name for _, name in taught if name not in plan.attrs["in_class"]]
    return plan
