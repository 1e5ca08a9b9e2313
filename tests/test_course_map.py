"""hvdcourse.course_map: planned lesson times and the recorded execution times the lessons glue."""
import json

import pytest

from hvdcourse import course_map


def test_recorded_execution_reads_the_lessons_time_machine_and_date():
    recorded = json.load(open(course_map.TIMES))
    lesson = sorted(recorded["lessons"])[0]
    got = course_map.recorded_execution(lesson)
    assert got == {"seconds": recorded["lessons"][lesson], "machine": recorded["machine"], "date": recorded["date"]}


def test_recorded_execution_of_an_unknown_lesson_says_how_to_record_it():
    with pytest.raises(KeyError, match="--record-times"):
        course_map.recorded_execution("99_no_such_lesson")
