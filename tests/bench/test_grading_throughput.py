"""The grading throughput the instructor guide shows (hvdcourse/course/bench/grading_throughput.py)."""

import json

import pytest

from hvdcourse.course.bench import grading_throughput as throughput


def write_runs(path, serial_wall, auto_wall, notebook_seconds, load=1.0, auto_students=1, cpu=None):
    """A record of a --jobs 1 run (one student) and a --jobs auto run (``auto_students``); ``cpu``:
    {notebook: {phase: CPU s}} per student (default: 1 s of each phase per notebook)."""
    cpu = cpu or {
        name: {"notebook": 1.0, "answers": 1.0, "judge": 1.0} for name in notebook_seconds
    }

    def run(jobs, used, wall, students):
        return {
            "date": "2026-11-23T17:00:00",
            "machine": {"cpu": "test cpu", "cores": 2, "memory_gb": 8},
            "load_average_before": [load, load, load],
            "load_average_after": [load, load, load],
            "mode": "local",
            "jobs": jobs,
            "jobs_used": used,
            "students": students,
            "notebooks": len(notebook_seconds) * students,
            "wall_seconds": wall,
            "cpu_seconds": 2 * wall,
            "notebook_seconds": {
                f"s{i}/{n}.ipynb": t for i in range(students) for n, t in notebook_seconds.items()
            },
            "notebook_cpu_seconds": {
                f"s{i}/{n}.ipynb": c for i in range(students) for n, c in cpu.items()
            },
            "statuses": ["ok"],
            "points": 48,
            "max_points": 48,
        }

    runs = [run("1", 1, serial_wall, 1), run("auto", 2, auto_wall, auto_students)]
    path.write_text(json.dumps({"runs": runs}))
    return str(path)


def test_the_speedup_and_the_learners_per_node_and_hour_come_from_the_two_runs(tmp_path):
    # auto is the faster
    data = write_runs(tmp_path / "t.json", 600, 400, {"a": 100, "b": 300, "c": 200})
    t = throughput.summary(data)
    assert t["speedup"] == 1.5 and t["students_per_hour_per_node"] == 9
    assert (t["notebook_min_s"], t["notebook_median_s"], t["notebook_max_s"]) == (100, 200, 300)
    assert t["per_notebook_floor_s"] == 300 and t["full_marks"]


def test_times_per_student_divide_a_run_by_its_students(tmp_path):
    # 3 students in 900 s with --jobs auto: 300 s each, against 600 s for the one graded alone
    data = write_runs(tmp_path / "t.json", 600, 900, {"a": 100}, auto_students=3)
    t = throughput.summary(data)
    assert t["auto_s"] == 300 and t["speedup"] == 2 and t["students_per_hour_per_node"] == 12
    assert t["class_auto_min"] == 30 * 300 / 60 and t["students_auto"] == 3


def test_the_cpu_time_bounds_how_fast_any_schedule_can_grade_a_class(tmp_path):
    # 1200 and 800 CPU s for one learner
    data = write_runs(tmp_path / "t.json", 600, 400, {"a": 100})
    t = throughput.summary(data)
    assert t["cpu_per_student_s"] == 800 and t["class_floor_min"] == 30 * 800 / 2 / 60
    assert t["class_auto_min"] == 30 * 400 / 60
    # 30 learners at 800 CPU s within 15 minutes; an idle node: 2 cores' 7200 CPU s an hour
    assert t["cores_for_goal"] == 27 and t["students_per_hour_per_node_max"] == 9


def test_the_cpu_breakdown_names_the_notebooks_above_the_mean(tmp_path):
    cpu = {
        "ex01": {"notebook": 1.0, "answers": 1.0, "judge": 0.5},
        "ex05": {"notebook": 6.0, "answers": 20.0, "judge": 0.5},
        "ex15": {"notebook": 4.0, "answers": 12.0, "judge": 0.5},
    }
    # the auto run is the leaner (120 CPU s for 2 learners against 200 for one): its breakdown
    data = write_runs(tmp_path / "t.json", 100, 60, {n: 10 for n in cpu}, auto_students=2, cpu=cpu)
    t = throughput.summary(data)
    assert (t["cpu_notebook_s"], t["cpu_answers_s"], t["cpu_judge_s"]) == (11, 33, 1.5)
    assert t["cpu_per_student_s"] == 60 and t["cpu_other_s"] == 60 - 45.5
    assert t["heavy_notebooks"] == ["ex05", "ex15"] and t["heavy_cpu_s"] == 43


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


def test_the_class_tool_gives_every_student_every_solution(tmp_path):
    throughput.make_class(str(tmp_path), students=2)
    names = sorted(p.name for p in (tmp_path / "student01").iterdir())
    assert len(names) == len(throughput.solution_notebooks()) > 0
    assert names == sorted(p.name for p in (tmp_path / "student02").iterdir())


def test_the_committed_figures_are_full_marks_for_every_solution():
    t = throughput.summary()
    assert t["notebooks"] == len(throughput.solution_notebooks()) and t["full_marks"]
