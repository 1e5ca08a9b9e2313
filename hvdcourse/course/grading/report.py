"""Scores, feedback and class summary from the graded notebooks (lesson: Instructor guide).

Input: for every student, the reports of their notebooks (see :mod:`hvdcourse.course.grading.runner`).
Output: ``scores.csv`` (one row per student, one column per exercise), ``feedback/<student>.md``,
``summary.md`` (mean per exercise, failures by message, problem submissions) and ``results.json``.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter

from hvdcourse.course.exercises.result import NOT_CHECKED, CheckResult
from hvdcourse.course.grading.job import Status


def notebook_exercise(nb: dict) -> str:
    """The exercise a notebook was submitted for, by what the grader read of it or else by its file
    name ('' if neither says): an unreadable file still names its exercise."""
    from hvdcourse.course.exercises.checks import EXERCISES

    named = [e for e in nb["report"].get("exercises", []) if e in EXERCISES]
    if named:
        return named[0]
    stem = nb["name"][: -len(".ipynb")] if nb["name"].endswith(".ipynb") else nb["name"]
    return next((e.id for e in EXERCISES.values() if stem.startswith(e.name)), "")


def exercise_scores(student: dict, exercises: dict) -> dict:
    """{exercise id: (CheckResult or None, notebook name)}: the best result of each exercise; a
    notebook that gave no result (unreadable, say) still names its exercise's notebook, with None."""
    best, tried = {}, {}
    for nb in student["notebooks"]:
        results = nb["report"].get("results", [])
        for data in results:
            result = CheckResult.from_dict(data)
            known = best.get(result.exercise)
            if known is None or result.score > known[0].score:
                best[result.exercise] = (result, nb["name"])
        if not results:
            tried.setdefault(notebook_exercise(nb), nb["name"])
    return {ex_id: best.get(ex_id, (None, tried.get(ex_id, ""))) for ex_id in exercises}


def why_no_result(student: dict, name: str) -> str:
    """What happened to the submitted notebook ``name`` that gave no result, in a few words."""
    nb = next((nb for nb in student["notebooks"] if nb["name"] == name), None)
    status = (nb or {}).get("report", {}).get("status", "")
    return Status.feedback_of(status)


def zeroed(data: dict, why: str) -> dict:
    """A result (as stored) with every criterion failed and ``why`` as its problem."""
    result = CheckResult.from_dict(data)
    for finding in result.findings:
        finding.passed, finding.detail, finding.hint = False, NOT_CHECKED, ""
    result.problem, result.problem_hint, result.status = why, "", "error"
    return result.to_dict()


def max_points(exercises: dict) -> dict:
    """{exercise id: maximum points}, from each check's declared criteria."""
    from hvdcourse.course.exercises.checks import EXERCISES

    return {
        ex_id: EXERCISES[ex_id]
        .check(*([None] * len(EXERCISES[ex_id].answers)), quiet=True)
        .max_score
        for ex_id in exercises
    }


def notebook_problems(nb: dict) -> list:
    """Lines describing what went wrong with one notebook (empty if nothing did)."""
    report, lines = nb["report"], []
    if report.get("problem"):
        lines.append(f"{nb['name']}: {report['problem']}")
    for v in report.get("violations", []):
        if v["kind"] == "read-solutions" and report.get("status") == "violation":
            continue  # the problem line above says it
        what = "tried to read" if v["kind"] == "read-solutions" else "tried to write"
        lines.append(f"{nb['name']}: {what} {v['path']} (denied by the grader)")
    for note in report.get("notes", []):
        lines.append(f"{nb['name']}: {note}")
    if report.get("answer_problem"):
        lines.append(f"{nb['name']}: {report['answer_problem']}")
    left = sorted({cell for cell, _, _ in report.get("left_out", [])})
    if left:
        kinds = sorted({what for _, _, what in report.get("left_out", [])})
        lines.append(
            f"{nb['name']}: your answers were judged from your definitions only; the top-level code of "
            f"cell(s) {', '.join(map(str, left))} ({'; '.join(kinds)[:160]}) does not run then"
        )
    for err in report.get("errors", []):
        if err["ename"] == "NotImplementedError" and err["evalue"].startswith("Exercise"):
            lines.append(
                f"{nb['name']}: cell {err['cell']} still has the placeholder ({err['evalue']})"
            )
        else:
            lines.append(f"{nb['name']}: cell {err['cell']} raised {err['ename']}: {err['evalue']}")
    return lines


def write_csv(path: str, students: list, exercises: dict, maxima: dict) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", *exercises, "total", "max", "problems"])
        for s in students:
            scores = [s["scores"][e][0].score if s["scores"][e][0] else 0 for e in exercises]
            problems = "; ".join(
                sorted({nb["report"].get("status") for nb in s["notebooks"]} - {"ok"})
            )
            writer.writerow(
                [
                    s["name"],
                    *(f"{v:g}" for v in scores),
                    f"{sum(scores):g}",
                    f"{sum(maxima.values()):g}",
                    problems,
                ]
            )


def feedback(student: dict, exercises: dict, maxima: dict) -> str:
    """The markdown feedback of one student."""
    total = sum(r.score for r, _ in student["scores"].values() if r)
    lines = [
        f"# Feedback for {student['name']}",
        "",
        f"**Total: {total:g} of {sum(maxima.values()):g} points.**",
        "",
        "| exercise | points | notebook |",
        "| --- | --- | --- |",
    ]
    for ex_id, title in exercises.items():
        result, nb = student["scores"][ex_id]
        points = f"{result.score:g} / {maxima[ex_id]:g}" if result else f"0 / {maxima[ex_id]:g}"
        if nb and result is None:  # submitted, but nothing could be judged: say what happened
            nb = f"{nb} ({why_no_result(student, nb)})"
        lines.append(f"| {ex_id}: {title} | {points} | {nb or 'not submitted'} |")
    for ex_id, title in exercises.items():
        result, nb = student["scores"][ex_id]
        if result is None and nb:
            report = next(n["report"] for n in student["notebooks"] if n["name"] == nb)
            label = f"Exercise {int(ex_id[2:])}" if ex_id[2:].isdigit() else ex_id
            lines += [
                "",
                f"## {label} - {title}: 0 of {maxima[ex_id]:g} points",
                "",
                f"- **Problem:** {nb} {why_no_result(student, nb)}"
                + (f": {report['problem']}" if report.get("problem") else "")
                + ". Nothing in it could be graded.",
            ]
            continue
        if result is None:
            continue
        lines += [
            "",
            f"## {result.exercise_label} - {title}: {result.score:g} of {maxima[ex_id]:g} points",
            "",
        ]
        if result.problem:
            lines.append(
                f"- **{'Not done yet' if result.status == 'not-done' else 'Problem'}:** {result.problem}"
                + (f" *Hint:* {result.problem_hint}" if result.problem_hint else "")
            )
        for f in result.findings:
            if f.passed:
                lines.append(f"- [x] {f.criterion}")
            elif f.detail == NOT_CHECKED:
                lines.append(f"- [ ] {f.criterion} (not checked: see the problem above)")
            else:
                lines.append(
                    f"- [ ] {f.criterion}: {f.detail}" + (f" *Hint:* {f.hint}" if f.hint else "")
                )
    problems = [line for nb in student["notebooks"] for line in notebook_problems(nb)]
    if problems:
        lines += ["", "## What happened while running your notebooks", ""] + [
            f"- {p}" for p in problems
        ]
    return "\n".join(lines) + "\n"


def summary(students: list, exercises: dict, maxima: dict, seconds: float) -> str:
    """The class summary in markdown."""
    n = len(students)
    lines = [
        "# Class summary",
        "",
        f"{n} student(s), {sum(len(s['notebooks']) for s in students)} notebook(s), "
        f"graded in {seconds:.0f} s.",
        "",
        "| exercise | max | mean | full marks | submitted |",
        "| --- | --- | --- | --- | --- |",
    ]
    for ex_id, title in exercises.items():
        results = [s["scores"][ex_id][0] for s in students]
        scores = [r.score if r else 0 for r in results]
        mean = sum(scores) / n if n else 0
        full = sum(1 for r in results if r and r.passed)
        submitted = sum(1 for s in students if s["scores"][ex_id][1])
        lines.append(
            f"| {ex_id}: {title} | {maxima[ex_id]:g} | {mean:.2f} | {full} | {submitted} |"
        )
    failures = Counter()
    for s in students:
        for result, _ in s["scores"].values():
            if result is None:
                continue
            if result.status == "not-done":
                failures[f"{result.exercise}: not done yet"] += 1
            elif result.problem:
                failures[f"{result.exercise}: {result.problem.split(':')[0]}"] += 1
            for f in result.findings:
                if not f.passed and f.detail != NOT_CHECKED and result.status != "not-done":
                    failures[f"{result.exercise}: {f.criterion}"] += 1
    lines += ["", "## Failures by message", "", "| students | message |", "| --- | --- |"]
    lines += [f"| {count} | {message} |" for message, count in failures.most_common()] or [
        "| 0 | (none) |"
    ]
    bad = [
        (s["name"], nb["name"], nb["report"].get("status"))
        for s in students
        for nb in s["notebooks"]
        if nb["report"].get("status") != "ok" or nb["report"].get("violations")
    ]
    lines += ["", "## Notebooks with problems", ""]
    lines += [
        f"- {name}/{nb}: {Status.feedback_of(status, otherwise=status)}"
        if status != "ok"
        else f"- {name}/{nb}: tried to write outside its folder (denied)"
        for name, nb, status in bad
    ] or ["- none"]
    return "\n".join(lines) + "\n"


def write_all(out: str, students: list, exercises: dict, seconds: float) -> dict:
    """Write every output file into ``out``; return {kind: path}."""
    maxima = max_points(exercises)
    for s in students:
        s["scores"] = exercise_scores(s, exercises)
    os.makedirs(os.path.join(out, "feedback"), exist_ok=True)
    paths = {
        "csv": os.path.join(out, "scores.csv"),
        "summary": os.path.join(out, "summary.md"),
        "json": os.path.join(out, "results.json"),
        "feedback": os.path.join(out, "feedback"),
    }
    write_csv(paths["csv"], students, exercises, maxima)
    for s in students:
        with open(os.path.join(out, "feedback", f"{s['name']}.md"), "w") as fh:
            fh.write(feedback(s, exercises, maxima))
    with open(paths["summary"], "w") as fh:
        fh.write(summary(students, exercises, maxima, seconds))
    with open(paths["json"], "w") as fh:
        json.dump(
            [
                {
                    "student": s["name"],
                    "notebooks": [{"name": nb["name"], **nb["report"]} for nb in s["notebooks"]],
                }
                for s in students
            ],
            fh,
            indent=1,
        )
    return paths
