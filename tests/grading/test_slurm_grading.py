"""hvdcourse-grade --slurm on the local 2-node cluster (hvdcourse.course.services.slurm_cluster): the same class gives the
same scores as a local run; an array past its wait is cancelled and every notebook gets a row saying so."""

import json
import os
import shutil
import sys
import time

import pytest

from conftest import ROOT
from hvdcourse.course.grading import slurm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grading_run import grade as run_grader  # noqa: E402  (the tests' one way to start the grader)

SUBMISSIONS = os.path.join(ROOT, "tests", "grading", "submissions")
NOTEBOOKS = ("ex01_collectives.ipynb", "ex03_sharding.ipynb")


@pytest.fixture(scope="module")
def cluster(local_cluster):
    """The session's local Slurm cluster (tests/conftest.py)."""
    return local_cluster


@pytest.fixture(scope="module")
def small_class(tmp_path_factory):
    """2 students x 2 exercises: the solutions (full marks) and bob's classic mistakes."""
    folder = tmp_path_factory.mktemp("class")
    for student, source in (
        ("alice", os.path.join(ROOT, "solutions")),
        ("bob", os.path.join(SUBMISSIONS, "bob")),
    ):
        os.makedirs(folder / student)
        for name in NOTEBOOKS:
            shutil.copy(os.path.join(source, name), folder / student / name)
    return str(folder)


def grade(folder, out, options, env=None, timeout=1200):
    return run_grader(folder, out, "--timeout", "300", *options, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def both(cluster, small_class, tmp_path_factory):
    local = grade(small_class, str(tmp_path_factory.mktemp("local")), ["--jobs", "2"])
    on_slurm = grade(
        small_class,
        str(tmp_path_factory.mktemp("slurm")),
        ["--slurm", "--slurm-wait", "1100"],
        env=cluster.env(),
    )
    return local, on_slurm


def test_slurm_gives_the_same_scores_as_a_local_run(both):
    local, on_slurm = both
    assert on_slurm["rows"] == local["rows"]
    assert float(local["rows"]["alice"]["ex01"]) == 5 and float(local["rows"]["alice"]["ex03"]) == 4
    assert float(local["rows"]["bob"]["ex01"]) == 3 and float(local["rows"]["bob"]["ex03"]) == 2


def test_slurm_runs_one_array_task_per_student_and_writes_the_same_feedback(both):
    local, on_slurm = both
    assert (
        "submitted Slurm array" in on_slurm["stdout"]
        and "2 task(s) for 4 notebook(s)" in on_slurm["stdout"]
    )
    for student in ("alice", "bob"):
        assert (
            open(os.path.join(on_slurm["out"], "feedback", f"{student}.md")).read()
            == open(os.path.join(local["out"], "feedback", f"{student}.md")).read()
        )
    logs = os.listdir(os.path.join(on_slurm["out"], "slurm", "logs"))
    assert sorted(logs) == ["task-0.log", "task-1.log"]


def test_an_array_past_its_wait_is_cancelled_and_its_notebooks_say_so(
    cluster, small_class, tmp_path
):
    result = grade(
        small_class,
        str(tmp_path / "out"),
        ["--slurm", "--slurm-wait", "2"],
        env=cluster.env(),
        timeout=300,
    )
    assert "was cancelled (scancel" in result["stdout"]
    report = json.load(open(tmp_path / "out" / "results.json"))[0]["notebooks"][0]
    assert (
        report["status"] == "timeout"
        and "did not finish within 2 s and was cancelled" in report["problem"]
    )
    deadline = time.monotonic() + 60
    while cluster.command(["squeue", "-h"]).stdout.strip() and time.monotonic() < deadline:
        # the cancelled tasks end (their SIGTERM handler kills the notebooks' processes)
        time.sleep(1)
    assert cluster.command(["squeue", "-h"]).stdout.strip() == ""


def test_a_unit_without_results_gets_a_row_naming_its_task_and_log(tmp_path):
    os.makedirs(tmp_path / "logs")
    (tmp_path / "logs" / "task-0.log").write_text("Traceback ...\nMemoryError: out of memory\n")
    outcomes = slurm.merge(
        str(tmp_path), "42", [["alice", ["/x/alice/ex01_collectives.ipynb"]]], False, 60
    )
    report = outcomes[0][1]["report"]
    assert outcomes[0][0] == "alice" and report["status"] == "grader-error"
    assert (
        "task 42_0 ended without results; the task's log ends with: MemoryError"
        in report["problem"]
    )


def test_each_task_gets_slurms_time_limit_for_all_its_notebooks():
    assert slurm.task_minutes(1, 600) == 22  # (2 x 600 + 60) s = 21 min, plus one
    assert slurm.task_minutes(11, 60) == 34
