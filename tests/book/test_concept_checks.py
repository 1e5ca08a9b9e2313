"""Every lesson carries two or three short concept checks, each a multiple-choice question with its
answer in a dropdown, in one form, placed beside the idea it checks (before the exercises).

The form, in MyST (it needs no execution)::

    ::::{admonition} Check your understanding
    :class: hint
    A question?

    - **a.** ...
    - **b.** ...

    :::{dropdown} Answer
    **b.** Why b is right, and why the tempting one is wrong.
    :::
    ::::
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LESSONS = sorted(
    name for name in os.listdir(os.path.join(ROOT, "notebooks")) if name.endswith(".md")
)
TITLE = "Check your understanding"
CHECK = re.compile(
    r"^::::\{admonition\} " + TITLE + r"\n:class: hint\n(?P<body>.*?)^::::[ \t]*$", re.S | re.M
)
OPTION = re.compile(r"^- \*\*([a-e])\.\*\* \S", re.M)
ANSWER = re.compile(r"^:::\{dropdown\} Answer\n(?P<answer>.*?)^:::[ \t]*$", re.S | re.M)
CHOSEN = re.compile(r"\A\s*\*\*([a-e])\.\*\* \S")


def text(lesson: str) -> str:
    return open(os.path.join(ROOT, "notebooks", lesson), encoding="utf-8").read()


def checks(page: str) -> list:
    return [match.group("body") for match in CHECK.finditer(page)]


def test_there_are_sixteen_lessons_to_check():
    assert len(LESSONS) == 16, LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_lesson_has_two_or_three_concept_checks(lesson):
    found = len(checks(text(lesson)))
    assert 2 <= found <= 3, f"{lesson} has {found} concept checks; each lesson needs 2 or 3"


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_check_uses_the_one_form(lesson):
    page = text(lesson)
    assert page.count(TITLE) == len(checks(page)), (
        f"{lesson}: a '{TITLE}' box does not use the form "
        "'::::{admonition} Check your understanding' + ':class: hint', closed by '::::'"
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_check_has_options_and_an_answer_dropdown_naming_one_of_them(lesson):
    for number, body in enumerate(checks(text(lesson)), 1):
        options = OPTION.findall(body.split(":::{dropdown}")[0])
        assert len(options) >= 3, f"{lesson}, check {number}: fewer than 3 options '- **a.** ...'"
        assert options == [chr(ord("a") + i) for i in range(len(options))], (
            f"{lesson}, check {number}: options are not lettered a, b, c, ... in order"
        )
        answers = ANSWER.findall(body)
        assert len(answers) == 1, f"{lesson}, check {number}: no ':::{{dropdown}} Answer' block"
        chosen = CHOSEN.match(answers[0])
        assert chosen, f"{lesson}, check {number}: the answer does not open with '**x.**'"
        assert chosen.group(1) in options, (
            f"{lesson}, check {number}: the answer names option {chosen.group(1)}, not offered"
        )
        assert len(answers[0].split()) >= 12, (
            f"{lesson}, check {number}: the answer gives no reason (say why, in a sentence or two)"
        )


@pytest.mark.parametrize("lesson", LESSONS)
def test_checks_sit_beside_their_idea_not_after_the_exercises(lesson):
    page = text(lesson)
    end = re.search(r"^## (?:Exercises|Key points)\s*$", page, re.M)
    assert end, f"{lesson} has no '## Exercises' or '## Key points' heading"
    late = [m.start() for m in CHECK.finditer(page) if m.start() > end.start()]
    assert not late, f"{lesson}: a concept check sits after '{end.group(0).strip()}'"
    headings = [h.start() for h in re.finditer(r"^#{2,3} ", page, re.M)]
    sections = {
        max((h for h in headings if h < m.start()), default=0) for m in CHECK.finditer(page)
    }
    assert len(sections) >= 2, f"{lesson}: all its concept checks sit in one section; spread them"


def test_the_scan_reads_a_well_formed_check_and_its_answer():
    page = (
        "::::{admonition} Check your understanding\n:class: hint\nWhy?\n\n"
        "- **a.** one\n- **b.** two\n- **c.** three\n\n"
        ":::{dropdown} Answer\n**b.** Because two is right here, and one is the tempting wrong choice.\n"
        ":::\n::::\n"
    )
    (body,) = checks(page)
    assert OPTION.findall(body) == ["a", "b", "c"]
    assert CHOSEN.match(ANSWER.findall(body)[0]).group(1) == "b"
