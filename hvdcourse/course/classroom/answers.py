"""The learners' written answers, bundled per question for marking by hand (lesson: Instructor guide).

A question is a markdown cell of the learner notebook that holds the placeholder ``**Your answer
(Exercise N):** _write it here_`` (made from a markdown solution region, see
:mod:`hvdcourse.course.exercises.markers`). In a collected notebook the answer is that cell (found by
its cell id, else by the question's text) without the question, plus any cells the learner added
after it.
"""

from __future__ import annotations

import csv
import json
import os
import re

from hvdcourse.course.classroom import layout

ANSWER_LINE = re.compile(r"^\*\*Your answer \([^)]*\):\*\*\s*", re.MULTILINE)
UNANSWERED = ("", "_write it here_")


def _text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def questions(exercise: str) -> list:
    """[{key, cell_id, prompt}] of the exercise's questions, in the notebook's order."""
    cells = json.loads(layout.learner_notebook(exercise))["cells"]
    found = []
    for cell in cells:
        text = _text(cell)
        match = ANSWER_LINE.search(text) if cell["cell_type"] == "markdown" else None
        if match:
            found.append(
                {
                    "key": f"q{len(found) + 1}",
                    "cell_id": cell.get("id", ""),
                    "prompt": text[: match.start()].strip(),
                }
            )
    return found


def answer(notebook: dict, question: dict, template_ids: set) -> str:
    """The learner's answer to ``question`` in ``notebook`` ('' when unanswered)."""
    cells = notebook.get("cells", [])
    first_line = question["prompt"].splitlines()[0] if question["prompt"] else "\0"
    index = next((i for i, c in enumerate(cells) if c.get("id") == question["cell_id"]), None)
    if index is None:
        index = next(
            (
                i
                for i, c in enumerate(cells)
                if c.get("cell_type") == "markdown" and first_line in _text(c)
            ),
            None,
        )
    if index is None:
        return ""
    text = _text(cells[index]).strip()
    if question["prompt"] and text.startswith(question["prompt"]):
        text = text[len(question["prompt"]) :]
    parts = [ANSWER_LINE.sub("", text.strip(), count=1).strip()]
    for cell in cells[index + 1 :]:  # cells the learner added below the answer
        if cell.get("id") in template_ids:
            break
        if cell.get("cell_type") in ("markdown", "raw"):
            parts.append(_text(cell).strip())
    parts = [p for p in parts if p not in UNANSWERED]
    return "\n\n".join(parts)


def bundle(course, users: list, exercise: str, records: dict) -> list:
    """Write answers/<exercise>/<question>.md (every learner's answer to it) and a marks.csv to fill in;
    returns the paths written."""
    asked = questions(exercise)
    template_ids = {c.get("id") for c in json.loads(layout.learner_notebook(exercise))["cells"]}
    folder = os.path.join(course.answers, exercise)
    os.makedirs(folder, exist_ok=True)
    written, learners = [], records.get("learners", {})
    notebooks = {}
    for user in users:
        path = os.path.join(course.root, learners.get(user, {}).get("notebook", "-"))
        try:
            with open(path, encoding="utf-8") as fh:
                notebooks[user] = json.load(fh)
        except (OSError, ValueError):
            notebooks[user] = None  # not collected, or not a readable notebook
    for question in asked:
        lines = [
            f"# {exercise}, question {question['key'][1:]}",
            "",
            *(f"> {line}" if line else ">" for line in question["prompt"].splitlines()),
            "",
            f"Mark an answer with `hvdcourse-class mark LEARNER {exercise} POINTS --question "
            f"{question['key']}`, or fill in `marks.csv` here and run `hvdcourse-class mark --csv "
            f"{os.path.join(folder, 'marks.csv')}`.",
        ]
        for user in users:
            nb = notebooks[user]
            text = answer(nb, question, template_ids) if nb is not None else None
            lines += ["", f"## {user}", ""]
            if text is None:
                lines.append("*(no notebook collected)*")
            elif not text:
                lines.append("*(no answer)*")
            else:
                lines += text.splitlines()
        path = os.path.join(folder, question["key"] + ".md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        written.append(path)
    marks = os.path.join(folder, "marks.csv")
    if asked and not os.path.exists(marks):  # the instructor's marks in progress are never replaced
        with open(marks, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["username", "exercise", "question", "points", "note"])
            for question in asked:
                for user in users:
                    writer.writerow([user, exercise, question["key"], "", ""])
        written.append(marks)
    return written
