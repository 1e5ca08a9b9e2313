"""``hvdcourse.course.lessons.conversion_record``: the recorded learning-rate lab (book/data/conversion_lab.json)
that the "going further" page reads is complete, made by today's commands, and states its machine.

The lab's code runs here on tiny settings (tests/lessons/test_conversion_lab.py); the full lab (15
trainings, about five minutes) runs when the record is made, not on every build."""

import json
import os

from conftest import ROOT
from hvdcourse.course.lessons import conversion_record
from hvdcourse.course.lessons.conversion_lab import CONFIGS

RECORD = os.path.join(ROOT, "book", "data", "conversion_lab.json")


def load():
    with open(RECORD) as fh:
        return json.load(fh)


def test_the_page_reads_the_record_in_the_book_data():
    assert conversion_record.RECORD == RECORD and os.path.exists(RECORD)


def test_the_record_was_made_by_the_commands_the_module_runs_today():
    recorded = load()
    for name, (ranks, launcher, args) in conversion_record.commands().items():
        assert recorded[name]["settings"]["out"] == args[1]
        assert recorded[name]["workers"] == ranks
        assert recorded["commands"][name].endswith(" ".join(args)), (
            "stale record: run python -m hvdcourse.course.lessons.conversion_record"
        )


def test_every_schedule_seed_and_epoch_was_trained_and_evaluated():
    recorded = load()
    settings = recorded["two_workers"]["settings"]
    for name, configs in (("two_workers", CONFIGS), ("one_worker", ("unscaled",))):
        rows = recorded[name]["epochs"]
        found = {(r["config"], r["seed"], r["epoch"]) for r in rows}
        expected = {
            (c, s, e)
            for c in configs
            for s in settings["seeds"]
            for e in range(1, settings["epochs"] + 1)
        }
        assert found == expected, name
        assert all(0.0 < r["test_accuracy"] <= 1.0 for r in rows)


def test_the_later_sections_data_is_there():
    lab = load()["two_workers"]
    assert len(lab["metric_views"]["own"]) == 2
    batches = {int(b) for b in conversion_record.BATCH_NORM_BATCHES}
    assert {row["batch"] for row in lab["batch_norm"]} == batches
    assert {row["rank"] for row in lab["memory"]} == {0, 1}


def test_the_record_states_its_machine_and_load():
    machine = load()["machine"]
    assert {"cpu_model", "logical_cores", "load_average_1_5_15min", "date"} <= set(machine)
