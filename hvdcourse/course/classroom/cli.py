"""``hvdcourse-class``: release, collect, grade, return, in one command (lesson: Instructor guide).

    hvdcourse-class release ex01 [--course DIR] [--roster FILE] [--homes DIR]
    hvdcourse-class collect ex01 --deadline 2026-11-27T18:00
    hvdcourse-class grade [ex01 ...] [--learner NAME] [--again] [--jobs auto]
    hvdcourse-class return [ex01 ...]
    hvdcourse-class answers ex01          # the written answers, one file per question
    hvdcourse-class mark alice ex01 2 [--question q1] [--note TEXT] | mark --csv marks.csv
    hvdcourse-class export [--out scores.csv]

Every command works in the course folder (``--course``, default: the current folder) and on the
learners of its roster (``--roster``, default ``COURSE/roster.csv``).
"""

from __future__ import annotations

import argparse
import os
import sys

from hvdcourse.course.classroom import answers, gradebook, grade, handout, layout, roster
from hvdcourse.runtime.errors import CheckFailed, UsageError, run_cli


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--course", default=".", help="the instructor's course folder (default: this folder)"
    )
    common.add_argument(
        "--roster",
        default=None,
        help="CSV/TSV with a 'username' column (default: COURSE/roster.csv)",
    )
    common.add_argument(
        "--homes",
        default=None,
        metavar="DIR",
        help="learners' homes are DIR/<username> (default: each Unix account's home directory)",
    )
    common.add_argument(
        "--folder",
        default="exercises",
        help="the folder in each home that receives the notebooks (default: exercises)",
    )
    return common


def parser() -> argparse.ArgumentParser:
    common = common_options()
    top = argparse.ArgumentParser(
        prog="hvdcourse-class",
        description="Run a class: release an exercise into the learners' homes, collect their "
        "notebooks, grade them into one gradebook, return the feedback, export the scores.",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = sub.add_parser
    release = add("release", parents=[common], help="copy an exercise notebook into every home")
    release.add_argument("exercise", help="ex01, or a notebook's name (ex01_collectives)")
    collect = add("collect", parents=[common], help="copy every learner's notebook here")
    collect.add_argument("exercise")
    collect.add_argument(
        "--deadline",
        default=None,
        help="notebooks saved after it are flagged late (2026-11-27T18:00, local time; kept for "
        "later collects)",
    )
    grading = add("grade", parents=[common], help="grade what was collected, merge the points")
    grading.add_argument("exercise", nargs="*", help="default: every collected exercise")
    grading.add_argument(
        "--learner", action="append", default=[], help="only this learner (repeat)"
    )
    grading.add_argument(
        "--again", action="store_true", help="also grade notebooks graded before and unchanged"
    )
    grading.add_argument("--jobs", default="1", help="notebooks graded at once, or auto")
    grading.add_argument("--timeout", default=None, help="seconds per notebook (grader's default)")
    back = add("return", parents=[common], help="put each learner's feedback into their home")
    back.add_argument("exercise", nargs="*", help="default: every graded exercise")
    back.add_argument("--learner", action="append", default=[], help="only this learner (repeat)")
    prose = add("answers", parents=[common], help="bundle the written answers per question")
    prose.add_argument("exercise")
    marking = add("mark", parents=[common], help="merge a mark given by hand into the gradebook")
    marking.add_argument("name", metavar="LEARNER", nargs="?")
    marking.add_argument("exercise", nargs="?")
    marking.add_argument("points", nargs="?")
    marking.add_argument("--question", default="q1", help="the question's key (default q1)")
    marking.add_argument("--note", default="", help="a comment for the learner's feedback")
    marking.add_argument(
        "--csv", default=None, help="a CSV of marks: username,exercise,question,points,note"
    )
    export = add(
        "export", parents=[common], help="write the scores for a learning-management system"
    )
    export.add_argument("--out", default=None, help="the CSV to write (default: COURSE/scores.csv)")
    return top


def run_class(argv=None) -> int:
    """Run one ``hvdcourse-class`` command; raises :class:`UsageError` on bad input."""
    args = parser().parse_args(argv)
    course = layout.Course(args.course)
    roster_path = args.roster or os.path.join(course.root, "roster.csv")
    names = roster.read_roster(roster_path)
    everyone = roster.learners(names, args.homes)
    chosen = roster.select(everyone, getattr(args, "learner", None), roster_path)
    failed = 0
    if args.command == "release":
        failed = handout.release(
            everyone, layout.resolve_exercise(args.exercise), args.folder, bool(args.homes)
        )
    elif args.command == "collect":
        exercise = layout.resolve_exercise(args.exercise)
        deadline = layout.parse_time(args.deadline) if args.deadline else None
        failed = handout.collect(course, everyone, exercise, args.folder, deadline)
    elif args.command == "grade":
        exercises = [layout.resolve_exercise(e) for e in args.exercise]
        options = ["--jobs", args.jobs] + (["--timeout", args.timeout] if args.timeout else [])
        grade.grade(course, [c.name for c in chosen], exercises, options, args.again)
    elif args.command == "return":
        book = gradebook.load(course)
        exercises = [layout.resolve_exercise(e) for e in args.exercise]
        exercises = exercises or gradebook.exercises_of(book)

        def compose(user, exercise):
            return gradebook.feedback(course, book, user, exercise)

        failed = handout.give_back(chosen, exercises, compose)
    elif args.command == "answers":
        exercise = layout.resolve_exercise(args.exercise)
        records = course.read(course.collected_file, {}).get(exercise, {})
        if not records:
            raise UsageError(
                f"{exercise} was never collected: run 'hvdcourse-class collect {exercise}' first"
            )
        written = answers.bundle(course, names, exercise, records)
        if not written:
            print(f"{exercise} asks no written question")
        for path in written:
            print(f"wrote {path}")
    elif args.command == "mark":
        mark(course, args, names, roster_path)
    elif args.command == "export":
        out = args.out or os.path.join(course.root, "scores.csv")
        columns = gradebook.export(gradebook.load(course), names, out)
        print(f"wrote {out}: {len(names)} learner(s), {len(columns)} exercise(s) and the total")
    if failed:
        raise CheckFailed(f"{failed} learner(s) could not be reached; see the lines above")
    return 0


def mark(course, args, names: list, roster_path: str) -> None:
    if args.csv:
        if args.name:
            raise UsageError("give either --csv FILE or LEARNER EXERCISE POINTS, not both")
        marks = gradebook.read_marks(args.csv, names, layout.resolve_exercise)
    else:
        if not (args.name and args.exercise and args.points):
            raise UsageError("give LEARNER EXERCISE POINTS (e.g. mark alice ex01 2) or --csv FILE")
        roster.select([roster.Learner(n, "") for n in names], [args.name], roster_path)
        exercise = layout.resolve_exercise(args.exercise)
        marks = [
            (
                args.name,
                exercise,
                args.question,
                gradebook.parse_points(args.points, "mark"),
                args.note,
            )
        ]
    book = gradebook.load(course)
    for user, exercise, question, value, note in marks:
        gradebook.mark(book, user, exercise, question, value, note)
        print(f"{user} {exercise} {question}: {value:g} point(s) by hand")
    course.write(course.gradebook_file, book)
    print(f"merged {len(marks)} mark(s) into {course.gradebook_file}")


def main(argv=None) -> int:
    """The ``hvdcourse-class`` command: :func:`run_class` with the course's one-line errors."""
    return run_cli(run_class, argv)


if __name__ == "__main__":
    sys.exit(main())
