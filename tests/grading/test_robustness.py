"""What the grader does with notebooks it did not expect: an old format 3 file, a foreign kernel, and a
notebook that hits each resource limit (memory, processes, CPU time); and how --jobs auto and the
progress line are made."""

import json
import os
import sys
import threading
import time

import nbformat
import pytest

from conftest import ROOT
from hvdcourse.course.exercises import checks
from hvdcourse.course.grading import grader
from hvdcourse.course.grading.runner import take_rank_slot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grading_run import feedback, grade  # noqa: E402  (the tests' one way to start the grader)

SOLUTION = os.path.join(ROOT, "solutions", "ex01_collectives.ipynb")


@pytest.fixture(scope="module")
def unusual(tmp_path_factory):
    """The ex01 solution saved in format 3, and saved for an R kernel."""
    folder = tmp_path_factory.mktemp("unusual")
    nb = nbformat.read(SOLUTION, as_version=4)
    os.makedirs(folder / "class" / "old")
    with open(folder / "class" / "old" / "ex01_collectives.ipynb", "w") as fh:
        fh.write(nbformat.writes(nbformat.convert(nb, 3)))
    foreign = nbformat.read(SOLUTION, as_version=4)
    foreign.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    os.makedirs(folder / "class" / "foreign")
    nbformat.write(foreign, str(folder / "class" / "foreign" / "ex01_collectives.ipynb"))
    return grade(folder / "class", folder / "out", "--jobs", "2", "--timeout", "300")


def test_a_format_3_notebook_is_converted_and_graded(unusual):
    assert json.load(open(SOLUTION))["nbformat"] == 4
    assert float(unusual["rows"]["old"]["ex01"]) == 5
    assert "saved in the old format 3; the grader converted it to format 4" in feedback(
        unusual, "old"
    )


def test_a_foreign_kernel_notebook_runs_in_the_course_kernel_and_the_feedback_says_so(unusual):
    assert float(unusual["rows"]["foreign"]["ex01"]) == 5
    assert "names the kernel 'ir'; it was run with the course's Python 3 kernel" in feedback(
        unusual, "foreign"
    )


LIMITED = {
    "memory": "import numpy as np\nbig = np.ones(4_000_000_000)\n",
    "processes": "import os, time\nfor _ in range(10_000):\n    if os.fork() == 0:\n        time.sleep(30)\n"
    "        os._exit(0)\n",
    "cpu": "x = 0\nwhile True:\n    x += 1\n",
    "honest": "print(sum(range(10)))\n",
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """One tiny notebook per limit (and one within them), graded with small limits in one batch."""
    folder = tmp_path_factory.mktemp("limits")
    for student, source in LIMITED.items():
        nb = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_code_cell(source), nbformat.v4.new_code_cell("1 + 1")]
        )
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        os.makedirs(folder / "class" / student)
        nbformat.write(nb, str(folder / "class" / student / "limits.ipynb"))
    return grade(
        folder / "class",
        folder / "out",
        *("--jobs", "2", "--timeout", "240", "--cell-timeout", "200"),
        *("--mem-mb", "2048", "--nproc", "64", "--cpu", "8"),
    )


@pytest.mark.parametrize(
    "student, status, words",
    [
        ("memory", "memory-limit", "hit the grader's limit of 2048 MB of memory per process"),
        ("processes", "process-limit", "hit the grader's limit of 64 processes and threads"),
        ("cpu", "cpu-limit", "used more than 8 s of CPU time"),
    ],
)
def test_each_limit_gives_its_own_row(limited, student, status, words):
    report = limited["first"][student]
    assert report["status"] == status and words in report["problem"], report
    assert limited["rows"][student]["problems"] == status


def test_the_batch_goes_on_after_the_limits(limited):
    assert limited["first"]["honest"]["status"] == "ok" and "[4/4]" in limited["stdout"]


@pytest.mark.parametrize("cores, expected", [(1, (1, 1)), (2, (2, 1)), (16, (16, 8))])
def test_jobs_auto_runs_a_notebook_per_core_and_a_2_rank_check_per_2_cores(cores, expected):
    assert grader.jobs_auto(cores) == expected


def test_jobs_auto_uses_the_cores_this_process_may_run_on():
    assert grader.jobs_auto()[0] == len(os.sched_getaffinity(0))


def test_a_2_rank_check_waits_while_the_only_slot_is_held(tmp_path):
    locks = [str(tmp_path / "ranks0.lock")]
    order = []
    with take_rank_slot(locks):
        waiter = threading.Thread(
            target=lambda: (take_rank_slot(locks).__exit__(), order.append("second"))
        )
        waiter.start()
        time.sleep(0.6)
        order.append("first released")
    waiter.join(10)
    assert order == ["first released", "second"]


def test_the_progress_line_shows_a_bar_and_the_time_left():
    assert (
        grader.progress_line(8, 20, 70)
        == "[########------------] 8/20, 1m10s elapsed, about 1m45s left"
    )
    assert grader.progress_line(20, 20, 75) == "[####################] 20/20, 1m15s elapsed"


def test_an_unreadable_notebook_is_named_in_its_exercise_row_not_called_not_submitted(tmp_path):
    """A file that is not JSON, and JSON that is no notebook: each row names the file and what
    happened to it, and only the exercise nobody handed in says 'not submitted'."""
    folder = tmp_path / "class" / "pat"
    folder.mkdir(parents=True)
    (folder / "ex01_collectives.ipynb").write_text('{"cells": [', encoding="utf-8")
    (folder / "ex03_sharding.ipynb").write_text('{"hello": "world"}', encoding="utf-8")
    graded = grade(tmp_path / "class", tmp_path / "out", "--jobs", "1", timeout=300)
    text = feedback(graded, "pat")
    assert "| 0 / 5 | ex01_collectives.ipynb (could not be read as a notebook) |" in text
    assert "| 0 / 4 | ex03_sharding.ipynb (could not be read as a notebook) |" in text
    assert (
        "- **Problem:** ex01_collectives.ipynb could not be read as a notebook: the file is not valid JSON"
        in text
    )
    assert "| ex02: Collectives on 2 ranks: an exact global mean | 0 / 4 | not submitted |" in text
    assert text.count("not submitted") == len(checks.EXERCISES) - 2
