"""The book's execution-time role shows the recorded time of a lesson, and refuses an unknown one."""
import json

import pytest

from hvdcourse.course.book.sphinx_ext import recorded_execution_time


def write_times(tmp_path, lessons):
    path = tmp_path / "execution_times.json"
    path.write_text(json.dumps({"machine": "test box, 2 cores", "date": "2026-11-23", "lessons": lessons}))
    return str(path)


def test_a_recorded_lesson_shows_its_seconds_machine_and_date(tmp_path):
    times = write_times(tmp_path, {"05_conversion": 95.1, "01_why_distributed": 1.54})
    assert recorded_execution_time("05_conversion", times) == "95 s (test box, 2 cores; build of 2026-11-23)"
    assert recorded_execution_time("01_why_distributed", times).startswith("1.5 s (")


def test_a_lesson_without_a_record_says_how_to_record_it(tmp_path):
    times = write_times(tmp_path, {})
    with pytest.raises(KeyError, match="--record-times"):
        recorded_execution_time("05_conversion", times)


def test_every_lesson_of_the_book_has_a_recorded_time():
    from hvdcourse.course.book.course_map import lessons
    for row in lessons():
        recorded_execution_time(row["lesson"])
