"""The exercises' stated times are the measured estimates (hvdcourse.course.exercises.timing): each
source's "Time: N minutes" is the estimate recorded in book/data/exercise_times.json rounded up to 5,
the file names the machine and the date of its runs, and its counts are those of the sources today.
Cheap: reads the file and the sources, runs no notebook."""

import json

import pytest

from hvdcourse.course.exercises import timing

SOURCES = timing.sources()


@pytest.fixture(scope="module")
def recorded():
    return json.load(open(timing.TIMES, encoding="utf-8"))


def test_the_times_file_names_the_machine_and_the_date_of_its_runs(recorded):
    assert recorded["machine"] and "cores" in recorded["machine"]
    assert recorded["date"][:2] == "20" and len(recorded["date"]) == 10


def test_the_times_file_states_its_rates_and_where_they_come_from(recorded):
    rates = recorded["rates"]
    assert rates == timing.RATES
    assert "Carver" in rates["read_source"] and "Karat" in rates["write_prose_source"]
    assert "course assumption" in rates["write_code_source"]
    assert "course assumption" in rates["debug_source"]


def test_every_exercise_is_timed(recorded):
    assert sorted(recorded["exercises"]) == sorted(SOURCES)


@pytest.mark.parametrize("stem", sorted(SOURCES))
def test_each_source_states_its_recorded_estimate_rounded_up_to_5_minutes(stem, recorded):
    row = recorded["exercises"][stem]
    assert row["stated_min"] == timing.rounded(row["total_min"])
    assert timing.stated_minutes(SOURCES[stem]) == row["stated_min"], (
        f"{stem}: the source states {timing.stated_minutes(SOURCES[stem])} min, the measured estimate "
        f"is {row['stated_min']} min: run python -m hvdcourse.course.exercises.timing --set-times, "
        "then make exercises"
    )


@pytest.mark.parametrize("stem", sorted(SOURCES))
def test_the_recorded_counts_are_those_of_the_source(stem, recorded):
    row = recorded["exercises"][stem]
    now = timing.counts(SOURCES[stem])
    assert {key: row[key] for key in now} == now, (
        f"{stem} changed since it was timed: run python -m hvdcourse.course.exercises.timing "
        "--counts-only (it keeps the measured run times), then --set-times and make exercises"
    )


@pytest.mark.parametrize("stem", sorted(SOURCES))
def test_the_recorded_estimate_follows_from_the_counts_and_the_run(stem, recorded):
    row = recorded["exercises"][stem]
    assert timing.estimate(row, row["run_s"], recorded["rates"]) == {
        key: row[key]
        for key in ("read_min", "write_min", "run_min", "debug_fix_min", "total_min", "stated_min")
    }


def test_a_time_is_rounded_up_to_the_next_multiple_of_5():
    assert [timing.rounded(m) for m in (0.1, 5, 5.01, 12.4, 20)] == [5, 5, 10, 15, 20]


def test_a_line_of_a_multiline_string_is_written_and_a_comment_is_not():
    code = 'x = 1  # set x\n# only a comment\n\ns = """#!/bin/bash\n#SBATCH --nodes=2\n"""\n'
    lines, tokens = timing.written(code)
    assert lines == 4  # x = 1 and the string's three lines; not the comment, not the blank line
    assert tokens == 6  # x = 1 s = """..."""
