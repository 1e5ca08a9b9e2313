"""hvdcourse.course.bench.ps_ring: the record lesson 03 plots (book/data/bench/ps_ring.json) is complete,
consistent with the code that measures, and was written by the suite's command.

The measurement itself is heavy (``make bench``); tests/bench/test_suite.py runs its quick version
and tests/lessons/test_parameter_server.py checks the parameter-server step's sum."""

import json
import os

import pytest

from conftest import ROOT
from hvdcourse.course.bench import ps_ring
from hvdcourse.course.bench.allreduce import message_sizes

RECORD = os.path.join(ROOT, "book", "data", "bench", "ps_ring.json")


@pytest.fixture(scope="module")
def record():
    with open(RECORD) as fh:
        return json.load(fh)


def test_the_record_was_written_by_the_suite_command_with_full_settings(record):
    assert record["command"].startswith("python -m hvdcourse.course.bench.suite --only ps_ring")
    assert record["settings"]["quick"] is False
    assert {"cpu_model", "logical_cores", "date", "load_average_1_5_15min"} <= set(
        record["machine"]
    )


def test_the_record_holds_every_algorithm_on_every_rank_count_at_every_size(record):
    assert record["ranks"] == list(ps_ring.RANKS) and record["impls"] == list(ps_ring.IMPLS)
    assert record["sizes"] == message_sizes(ps_ring.MIN_BYTES, ps_ring.MAX_BYTES)
    assert record["repeats"] == ps_ring.REPEATS and record["env"] == ps_ring.ENV
    found = sorted((d["ranks"], d["impl"]) for d in record["results"])
    assert found == sorted((n, i) for n in ps_ring.RANKS for i in ps_ring.IMPLS)
    for doc in record["results"]:
        assert doc["correct"] and len(doc["load_average_before"]) == 3
        assert [row["bytes"] for row in doc["rows"]] == record["sizes"]
        assert all(row["seconds"] > 0 and row["repeats"] == ps_ring.REPEATS for row in doc["rows"])


def test_every_algorithm_gets_a_positive_latency_and_bandwidth_from_the_record(record):
    fits = ps_ring.fits(record)
    assert set(fits) == set(ps_ring.IMPLS)
    assert all(f["alpha"] > 0 and f["beta"] > 0 for f in fits.values()), fits
