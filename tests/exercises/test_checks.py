"""The list of exercises and the learner-facing checks (hvdcourse/course/exercises/checks.py, paths.py, result.py)."""

import os

import jupytext
import pytest

from hvdcourse.course.exercises import checks, paths
from hvdcourse.course.exercises.result import Checker


def test_every_exercise_has_a_source_notebook_and_the_same_title_everywhere():
    for exercise in checks.EXERCISES.values():
        source = jupytext.read(os.path.join(paths.SOURCE_DIR, exercise.name + ".md"))
        assert source.metadata["hvdcourse"]["exercise"] == exercise.id
        assert source.metadata["hvdcourse"]["title"] == exercise.title
        answers = [None] * len(exercise.answers)
        assert exercise.check(*answers, quiet=True).title == exercise.title


def test_every_answer_name_is_defined_in_the_solution_source():
    for exercise in checks.EXERCISES.values():
        text = open(os.path.join(paths.SOURCE_DIR, exercise.name + ".md")).read()
        for name in exercise.answers:
            assert f"def {name}(" in text or f"{name} = " in text, (exercise.id, name)


def test_a_right_answer_is_told_so(capsys):
    c = Checker("ex01", "A title", {"a": ("the thing works", 2)})
    c.ok("a")
    result = c.finish()
    assert result.passed and result.score == 2
    assert (
        "Exercise 1 - A title: all 1 checks passed (2/2 points). Well done."
        in capsys.readouterr().out
    )


def test_a_wrong_answer_shows_detail_and_hint_but_no_traceback(capsys):
    c = Checker("ex02", "A title", {"a": ("the thing works", 1), "b": ("the other thing", 1)})
    c.fail("a", "it returned 3", "add one")
    c.finish()
    out = capsys.readouterr().out
    assert "[FAIL] the thing works" in out and "it returned 3" in out and "Hint: add one" in out
    assert "(1 more check(s) wait until the problems above are fixed)" in out


def test_results_survive_the_trip_through_json():
    c = Checker("ex03", "A title", {"a": ("x", 1), "b": ("y", 3)})
    c.ok("b")
    result = c.finish(quiet=True)
    again = type(result).from_dict(result.to_dict())
    assert (again.score, again.max_score, again.exercise) == (3, 4, "ex03")


def test_while_grading_the_learner_check_defers_to_the_grader(monkeypatch, capsys):
    monkeypatch.setenv("HVDCOURSE_GRADING", "1")
    assert checks.ex11_bugs({"unscaled-lr": 22}) is None
    assert "runs once, in the grader's own cell" in capsys.readouterr().out


def test_while_grading_the_solutions_folder_is_not_given_out(monkeypatch):
    monkeypatch.setenv("HVDCOURSE_GRADING", "1")
    with pytest.raises(PermissionError):
        paths.solutions_dir()


def test_a_missing_data_file_names_the_folder():
    with pytest.raises(FileNotFoundError, match="exercise data file 'nope.json' is missing"):
        paths.data_path("nope.json")
