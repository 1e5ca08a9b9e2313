"""hvdcourse-lint on Exercise 11's buggy script: every kind of mistake the exercise plants is found,
by the rule that names it, on a line where the grader's key says it shows."""

import pytest

from hvdcourse.course.check.lint.lint import lint_file
from hvdcourse.course.exercises import checks, checks_tools
from hvdcourse.course.exercises.paths import data_path
from hvdcourse.course.grading import keys

# the exercise's kind -> the linter's rule
RULE_OF_KIND = {
    "undefined-name": "undefined-name",
    "unsharded-data": "unsharded-data",
    "unscaled-lr": "unscaled-lr",
    "warmup-argument": "horovod-argument",
    "missing-broadcast": "missing-broadcast",
    "every-rank-checkpoints": "every-rank-checkpoints",
    "unaveraged-metrics": "unaveraged-metrics",
}


@pytest.fixture(scope="module")
def findings():
    return [f for f in lint_file(data_path(checks_tools.BUGGY_SCRIPT)) if not f.note]


def test_every_kind_of_the_exercise_has_a_rule():
    assert set(RULE_OF_KIND) == set(checks.BUG_KINDS)


@pytest.mark.parametrize("kind", sorted(RULE_OF_KIND))
def test_each_planted_mistake_is_found_by_its_rule_on_a_line_of_the_key(findings, kind):
    lines = {f.line for f in findings if f.rule == RULE_OF_KIND[kind]}
    assert lines & keys.bug_lines(kind), (kind, sorted(lines), sorted(keys.bug_lines(kind)))


def test_no_finding_is_on_a_line_without_a_mistake(findings):
    planted = set().union(*(keys.bug_lines(kind) for kind in checks.BUG_KINDS))
    assert [f.format() for f in findings if f.line not in planted] == []


def test_the_exercises_feedback_points_to_the_tool_once_every_mistake_is_found(capsys):
    answer = {kind: min(keys.bug_lines(kind)) for kind in checks.BUG_KINDS}
    assert checks.ex11_find_the_bug(answer).passed
    assert "hvdcourse-lint my_train.py" in capsys.readouterr().out
    checks.ex11_find_the_bug({"unscaled-lr": min(keys.bug_lines("unscaled-lr"))})
    assert "hvdcourse-lint" not in capsys.readouterr().out  # not before: it would give answers
