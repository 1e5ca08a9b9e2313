"""The 30-learner record the instructor guide reads (book/data/hub_scale.json, written by
``python -m hvdcourse.course.hub.scale --learners 30 --record book/data/hub_scale.json``): a whole,
successful run whose fields are the code's. The run itself takes minutes and is not part of the tests.
"""

from __future__ import annotations

import json

import pytest

from hvdcourse.course.hub import scale


@pytest.fixture(scope="module")
def record():
    with open(scale.DATA, encoding="utf-8") as fh:
        return json.load(fh)


def test_the_record_has_every_field_the_code_writes_and_no_other(record):
    assert sorted(record) == sorted(scale.FIELDS)
    assert set(record["machine"]) == {"cpu", "cores", "memory_gib"}
    assert len(record["load_average_before"]) == len(record["load_average_after"]) == 3


def test_the_record_is_a_full_30_learner_run_that_left_nothing(record):
    assert record["learners"] == scale.LEARNERS == 30
    assert record["processes_left_after_cull"] == 0
    assert record["processes_left_after_hub_stop"] == 0
    assert record["tls"] and record["spawner"] == "local"


def test_the_records_figures_are_measurements_in_range(record):
    assert 0 < record["start_requests_s"] <= record["start_all_s"] < scale.START_TIMEOUT
    assert 20 <= record["uss_mb_median"] <= record["rss_mb_median"] <= record["rss_mb_max"] < 2048
    assert record["rss_mb_all"] >= record["learners"] * record["rss_mb_median"] * 0.5
    assert record["idle_timeout_s"] >= 10
    assert record["idle_timeout_s"] <= record["culled_all_after_s"] < record["idle_timeout_s"] + 300


def test_the_guides_summary_reads_the_record():
    figures = scale.summary()
    assert figures["per_learner_s"] == figures["start_all_s"] / figures["learners"]
    assert figures["day"] == figures["date"][:10]
