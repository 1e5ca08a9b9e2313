"""The 30-learner class round the instructor guide reads (book/data/class_round.json, written by
``python -m hvdcourse.course.hub.class_round --learners 30 --record book/data/class_round.json``): a
whole, successful run whose fields are the code's and whose outcomes match what each learner handed
in. The run itself takes minutes and is not part of the tests; the same round with 3 learners in a
real browser is test_class_hub.py.
"""

from __future__ import annotations

import json

import pytest

from hvdcourse.course.hub import class_round


@pytest.fixture(scope="module")
def record():
    with open(class_round.DATA, encoding="utf-8") as fh:
        return json.load(fh)


def test_the_record_has_every_field_the_code_writes_and_no_other(record):
    assert sorted(record) == sorted(class_round.FIELDS)
    assert set(record["machine"]) == {"cpu", "cores", "memory_gib"}
    assert set(record["seconds"]) == {
        "release",
        "hand_in",
        "collect",
        "grade",
        "return",
        "export",
        "all",
    }


def test_the_record_is_a_whole_class_of_30_with_every_kind_of_hand_in(record):
    assert record["learners"] == class_round.LEARNERS == 30
    names = [f"x{i}" for i in range(30)]
    kinds = class_round.cast(names)
    assert record["kinds"] == {k: list(kinds.values()).count(k) for k in set(kinds.values())}
    assert record["feedback_returned"] == record["feedback_closed_to_others"] == 30
    assert record["answer_key_closed_to"] == 30


def test_every_learner_got_what_their_hand_in_earned(record):
    points, full, kinds = record["points"], record["full_points"], record["kinds"]
    assert full > 0
    assert points["right"] == [full] * kinds["right"] and points["late"] == [full] * kinds["late"]
    for kind in ("constant", "untouched", "unreadable", "missing"):
        assert len(points[kind]) == kinds[kind] and max(points[kind]) <= full / 4, kind
    assert len(record["late_flagged"]) == kinds["late"]
    assert len(record["not_submitted"]) == kinds["missing"]
    assert len(record["unreadable"]) == kinds["unreadable"]


def test_the_steps_add_up_to_the_whole_round(record):
    seconds = record["seconds"]
    steps = sum(v for k, v in seconds.items() if k != "all")
    assert 0 < seconds["grade"] <= steps <= seconds["all"] + 1
    assert seconds["all"] < steps + 10  # the rest is the deadline's two one-second pauses


def test_the_class_was_graded_alike_on_one_and_two_slurm_nodes(record):
    assert record["slurm_same_scores"] is True
    assert set(record["slurm_grade_s"]) == {"1", "2"} and min(record["slurm_grade_s"].values()) > 0


def test_the_guides_summary_reads_the_record():
    figures = class_round.summary()
    assert figures["graded"] == figures["learners"] - figures["kinds"]["missing"]
    assert figures["grade_per_notebook_s"] == figures["seconds"]["grade"] / figures["graded"]
    slurm = figures["slurm_grade_s"]
    assert figures["slurm_speedup"] == slurm["1"] / slurm["2"]
