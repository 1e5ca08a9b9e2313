"""Hostile submissions (tests/grading/hostile_samples.py): every attack on the grader scores 0 with
untouched answers, cannot make a wrong answer look right, and gets a row saying what happened."""

import glob
import hashlib
import os
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grading_samples  # noqa: E402
import hostile_samples as hostile  # noqa: E402
from grading_run import grade  # noqa: E402  (the tests' one way to start the grader)


def _course_digest():
    files = sorted(glob.glob(os.path.join(ROOT, "hvdcourse", "**", "*.py"), recursive=True))
    return hashlib.sha256(b"".join(open(f, "rb").read() for f in files)).hexdigest()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    for path in glob.glob(hostile.CANARY + "*"):
        os.remove(path)
    before = _course_digest()
    folder = str(tmp_path_factory.mktemp("hostile"))
    students = hostile.build(os.path.join(folder, "class"), grading_samples.BOB_EX01)
    graded = grade(
        os.path.join(folder, "class"),
        os.path.join(folder, "out"),
        *("--jobs", "2", "--timeout", "120", "--cell-timeout", "30"),
        *("--mem-mb", "4096", "--nproc", "256"),
        timeout=1800,
    )
    return {**graded, "students": students, "changed": _course_digest() != before}


def test_the_suite_has_at_least_ten_kinds_of_attack():
    assert len(hostile.ATTACKS) >= 10


@pytest.mark.parametrize("attack", sorted(hostile.ATTACKS))
def test_an_attack_with_untouched_answers_scores_zero(graded, attack):
    assert float(graded["rows"][attack]["ex01"]) == 0, graded["first"][attack]
    feedback = open(os.path.join(graded["out"], "feedback", f"{attack}.md")).read()
    assert "still raises NotImplementedError" in feedback
    assert "## What happened while running your notebooks" in feedback


@pytest.mark.parametrize("attack", hostile.WRONG_LOOKS_RIGHT)
def test_an_attack_does_not_make_a_wrong_answer_look_right(graded, attack):
    # bob's summed allreduce, as without the attack
    assert float(graded["rows"][f"{attack}_wrong"]["ex01"]) == 3


def test_the_course_files_are_unchanged_and_no_definition_ran_code_in_the_answer_run(graded):
    assert not graded["changed"]
    marks = [line for path in glob.glob(hostile.CANARY + "*") for line in open(path).read().split()]
    # only the notebook run may run them (its audit hook denies)
    assert all(m.startswith("s") for m in marks)


def test_the_attack_cells_are_named_in_the_feedback(graded):
    feedback = open(os.path.join(graded["out"], "feedback", "patch_check_classes.md")).read()
    assert "the top-level code of cell(s) 1" in feedback


def test_limits_give_their_own_row(graded):
    report = graded["first"]["fork_bomb_and_memory"]
    assert report["status"] in ("memory-limit", "process-limit"), report
