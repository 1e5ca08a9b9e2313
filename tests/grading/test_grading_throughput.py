"""The grading throughput the instructor guide shows (hvdcourse/course/grading/throughput.py)."""

import json

import pytest

from hvdcourse.course.grading import throughput


def write_runs(path, serial_wall, auto_wall, notebook_seconds, load=1.0):
    def run(jobs, used, wall):
        return {
            "date": "2026-11-23T17:00:00",
            "machine": {"cpu": "test cpu", "cores": 2, "memory_gb": 8},
            "load_average_before": [load, load, load],
            "load_average_after": [load, load, load],
            "mode": "local",
            "jobs": jobs,
            "jobs_used": used,
            "students": 1,
            "notebooks": len(notebook_seconds),
            "wall_seconds": wall,
            "cpu_seconds": 2 * wall,
            "notebook_seconds": notebook_seconds,
            "statuses": ["ok"],
            "points": 48,
            "max_points": 48,
        }

    path.write_text(json.dumps({"runs": [run("1", 1, serial_wall), run("auto", 2, auto_wall)]}))
    return str(path)


def test_the_speedup_and_the_learners_per_node_and_hour_come_from_the_two_runs(tmp_path):
    # auto is the faster
    data = write_runs(tmp_path / "t.json", 600, 400, {"a": 100, "b": 300, "c": 200})
    t = throughput.summary(data)
    assert t["speedup"] == 1.5 and t["students_per_hour_per_node"] == 9
    assert (t["notebook_min_s"], t["notebook_median_s"], t["notebook_max_s"]) == (100, 200, 300)
    assert t["per_notebook_floor_s"] == 300 and t["full_marks"]


def test_the_cpu_time_bounds_how_fast_any_schedule_can_grade_a_class(tmp_path):
    # 1200 and 800 CPU s for one learner
    data = write_runs(tmp_path / "t.json", 600, 400, {"a": 100})
    t = throughput.summary(data)
    assert t["cpu_per_student_s"] == 800 and t["class_floor_min"] == 30 * 800 / 2 / 60
    assert t["class_auto_min"] == 30 * 400 / 60


def test_nodes_needed_grow_with_the_class(tmp_path):
    data = write_runs(tmp_path / "t.json", 600, 400, {"a": 100})
    assert throughput.nodes_for(9, 60, data) == 1 and throughput.nodes_for(10, 60, data) == 2


def test_a_load_above_the_cores_marks_the_figures_as_from_a_loaded_machine(tmp_path):
    assert throughput.summary(write_runs(tmp_path / "t.json", 6, 4, {"a": 1}, load=9.5))["loaded"]
    assert not throughput.summary(write_runs(tmp_path / "u.json", 6, 4, {"a": 1}, load=0.5))[
        "loaded"
    ]


def test_a_missing_run_says_how_to_record_it(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(ValueError, match="needs a --jobs 1 and a --jobs auto run"):
        throughput.summary(str(path))


def test_the_committed_figures_are_full_marks_for_every_solution():
    t = throughput.summary()
    assert t["notebooks"] == 11 and t["full_marks"]
