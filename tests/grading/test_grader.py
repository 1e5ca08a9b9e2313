"""hvdcourse-grade on the sample class (tests/grading/submissions): scores, feedback, summary, and one
clear result for every broken notebook without stopping the batch."""

import json
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT
from hvdcourse.course.exercises import checks
from hvdcourse.course.grading import grader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grading_samples as samples  # noqa: E402  (the builder of the sample class, next to this file)
from grading_run import feedback, grade  # noqa: E402  (the tests' one way to start the grader)

SUBMISSIONS = os.path.join(ROOT, "tests", "grading", "submissions")
OUTSIDE_FILE = "/tmp/hvdcourse-sample-eve-was-here.txt"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if os.path.exists(OUTSIDE_FILE):
        os.remove(OUTSIDE_FILE)
    return grade(
        SUBMISSIONS,
        tmp_path_factory.mktemp("results"),
        *("--jobs", "2", "--timeout", "600", "--cell-timeout", "60", "--output-cap", "500"),
    )


def test_committed_samples_are_what_the_builder_makes(tmp_path):
    written = samples.build(str(tmp_path))
    for path in written:
        committed = os.path.join(SUBMISSIONS, os.path.relpath(path, tmp_path))
        assert open(path).read() == open(committed).read(), (
            f"stale sample: run python tests/grading/grading_samples.py ({committed})"
        )


def test_progress_is_printed_for_every_notebook(graded):
    total = sum(len(os.listdir(os.path.join(SUBMISSIONS, s))) for s in os.listdir(SUBMISSIONS))
    assert f"[{total}/{total}]" in graded["stdout"] and "[1/" in graded["stdout"]


def test_csv_has_one_row_per_student_and_a_column_per_exercise(graded):
    assert sorted(graded["rows"]) == ["alice", "bob", "carol", "dave", "eve"]
    assert sorted(checks.EXERCISES) == [k for k in graded["rows"]["alice"] if k.startswith("ex")]


def test_correct_answers_get_full_marks(graded):
    row = graded["rows"]["alice"]
    expected = {
        "ex01": 5,
        "ex03": 4,
        "ex04": 5,
        "ex08": 4,
        "ex09": 4,
        "ex10": 4,
        "ex11": 7,
        "ex12": 5,
        "ex13": 5,
        "ex14": 5,
    }
    assert {k: float(row[k]) for k in expected} == expected
    assert float(row["total"]) == sum(expected.values()) and row["problems"] == ""


@pytest.mark.parametrize("name", samples.RANK_CHECKED_SOLUTIONS)
def test_the_solutions_submitted_by_alice_run_without_a_cell_error_and_pass_their_checks(
    graded, name
):
    """The suite's one run of these solutions and their 2-rank checks (tests/exercises leaves them
    to this run): alice's code cells are the solution's, none fails in the grader's kernel, and every
    check passes."""

    def code(path):
        nb = nbformat.read(path, as_version=4)
        return [c.source for c in nb.cells if c.cell_type == "code"]

    alice = os.path.join(SUBMISSIONS, "alice", f"{name}.ipynb")
    assert code(alice) == code(os.path.join(ROOT, "solutions", f"{name}.ipynb"))
    report = graded["reports"][("alice", name)]
    assert report["status"] == "ok" and report["errors"] == [], report
    # passed: what the learner's check prints as "all N checks passed"
    assert report["results"] and all(r["passed"] for r in report["results"]), report["results"]


def test_classic_mistakes_get_the_intended_deductions(graded):
    row = graded["rows"]["bob"]
    assert {
        k: float(row[k])
        for k in (
            "ex01",
            "ex02",
            "ex03",
            "ex04",
            "ex06",
            "ex07",
            "ex10",
            "ex11",
            "ex12",
            "ex13",
            "ex14",
            "ex15",
        )
    } == {
        "ex01": 3,
        "ex02": 2,
        "ex03": 2,
        "ex04": 4,
        "ex06": 0,
        "ex07": 3,
        "ex10": 0,  # clean and well-formed, nothing right: the form alone earns nothing
        "ex11": 3,
        "ex12": 1,
        "ex13": 3,
        "ex14": 3,
        "ex15": 6,
    }


@pytest.mark.parametrize(
    "message",
    [
        "Horovod's allreduce AVERAGES by default",  # ex01: summed
        "the result is one flat vector",  # ex01: nested allgather
        "that is the average of the two ranks' means",  # ex02: unweighted mean of means
        "never used",  # ex03: remainder dropped
        "send one chunk (1/N of the vector) per step",  # ex04: whole vectors
        "it is initial_lr=",  # ex06: the Large-scale Computation guide's lr= argument
        "add hvd.callbacks.MetricAverageCallback()",  # ex07: metrics not averaged
        "append the checkpoint callback only if hvd.rank() == 0",  # ex07: every rank writes
        "sbatch ignores '#SBATCH --ntasks-per-node",  # ex10: header after a command
        "starts the ranks with mpirun/horovodrun",  # ex10
        "line [12] is not where this one shows",  # ex11: wrong line
        "gather the other ranks' blocks",  # ex12: no allgather
        "idle time over the WORK",  # ex13: (p-1)/m
        "set average_aggregated_gradients=True",  # ex14: summed accumulation
        "did you broadcast the optimizer state?",  # ex15: rank 1 without rank 0's Adam state
        "call sampler.set_epoch(epoch)",  # ex15: every epoch in the first one's order
        "is the linear rule, made for SGD",  # ex15: Adam's rate times N from the first step
    ],
)
def test_feedback_explains_each_mistake(graded, message):
    assert message in feedback(graded, "bob")


def test_syntax_error_is_reported_with_its_cell_and_scores_zero(graded):
    report = graded["reports"][("carol", "ex01_collectives")]
    assert report["status"] == "ok" and report["errors"][0]["ename"] == "SyntaxError"
    assert float(graded["rows"]["carol"]["ex01"]) == 0
    assert "the notebook defines no after_collectives" in feedback(graded, "carol")


def test_sys_exit_in_a_cell_does_not_stop_the_notebook(graded):
    report = graded["reports"][("carol", "ex03_sharding")]
    assert [e["ename"] for e in report["errors"]] == ["SystemExit"]
    assert float(graded["rows"]["carol"]["ex03"]) == 4


def test_a_crashing_kernel_gets_its_own_result(graded):
    report = graded["reports"][("carol", "ex04_ring_allreduce")]
    assert (
        report["status"] == "kernel-died" and "the Python kernel died in cell" in report["problem"]
    )
    # Her answer cell is the solution: the answers are judged from the notebook's definitions in a run of
    # their own, so a crash elsewhere in the notebook no longer costs the points of a correct answer.
    assert float(graded["rows"]["carol"]["ex04"]) == 5


def test_malformed_json_is_reported_as_unreadable(graded):
    report = graded["reports"][("dave", "ex01_collectives")]
    assert report["status"] == "unreadable" and "not valid JSON" in report["problem"]
    # its row names the file and what happened to it: it was submitted
    assert "| 0 / 5 | ex01_collectives.ipynb (could not be read as a notebook) |" in feedback(
        graded, "dave"
    )


def test_an_endless_loop_is_stopped_and_the_mpi_ranks_it_started_are_killed(graded):
    report = graded["reports"][("dave", "ex10_slurm")]
    assert report["status"] == "timeout" and "still running after 60 s" in report["problem"]
    left = subprocess.run(
        ["pgrep", "-f", samples.MARKER], capture_output=True, text=True
    ).stdout.split()
    assert [pid for pid in left if int(pid) != os.getpid()] == []


def test_huge_output_is_capped(graded):
    report = graded["reports"][("dave", "ex11_find_the_bug")]
    assert report["status"] == "output-cap" and report["output_bytes"] < 2_000_000
    assert "printed more than 500 kB" in report["problem"]


def test_rich_output_is_capped_by_the_grader_itself(graded):
    report = graded["reports"][("dave", "ex03_sharding")]
    assert (
        report["status"] == "output-cap" and "the cells after it were not run" in report["problem"]
    )


def test_reading_the_solutions_is_denied_and_the_notebook_scores_zero(graded):
    report = graded["reports"][("eve", "ex01_collectives")]
    assert report["status"] == "violation" and "solutions" in report["violations"][0]["path"]
    assert float(graded["rows"]["eve"]["ex01"]) == 0
    assert "tried to read" in feedback(graded, "eve")


def test_a_program_reading_the_solutions_is_caught_too(graded):
    report = graded["reports"][("eve", "ex10_slurm")]
    assert report["status"] == "violation" and float(graded["rows"]["eve"]["ex10"]) == 0


def test_writing_outside_the_folder_is_denied_and_reported_but_graded(graded):
    report = graded["reports"][("eve", "ex03_sharding")]
    assert not os.path.exists(OUTSIDE_FILE)
    assert report["violations"][0]["kind"] == "write-outside"
    assert float(graded["rows"]["eve"]["ex03"]) == 4
    assert f"tried to write {OUTSIDE_FILE}" in feedback(graded, "eve")


def test_summary_has_means_failures_by_message_and_problem_notebooks(graded):
    with open(os.path.join(graded["out"], "summary.md")) as fh:
        text = fh.read()
    assert "| ex01: Collectives: what every rank holds | 5 |" in text
    assert "ex07: validation metrics are averaged" in text
    assert "- dave/ex10_slurm.ipynb: ran past the time limit and was stopped" in text
    assert "- eve/ex01_collectives.ipynb: tried to read the solutions" in text


def test_without_a_mount_namespace_the_audit_hook_alone_catches_a_program_reading_solutions(
    tmp_path, capsys
):
    os.makedirs(tmp_path / "class" / "eve")
    shutil.copy(os.path.join(SUBMISSIONS, "eve", "ex10_slurm.ipynb"), tmp_path / "class" / "eve")
    assert (
        grader.main(
            [
                str(tmp_path / "class"),
                "--out",
                str(tmp_path / "out"),
                "--no-hide",
                "--timeout",
                "120",
            ]
        )
        == 0
    )
    assert "mount namespace" not in capsys.readouterr().out
    report = json.load(open(tmp_path / "out" / "results.json"))[0]["notebooks"][0]
    assert report["status"] == "violation" and report["hidden"] == []


def test_a_missing_submissions_folder_is_a_usage_error(tmp_path, capsys):
    assert grader.main([str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("hvdcourse: error: ") and err.count("\n") == 1 and "is not a folder" in err
    )


def test_a_training_answer_reads_the_courses_mnist_inside_the_sandbox(tmp_path):
    """The sandbox user has its own HOME and may not enter the grader's cache: the grader hands it the
    course's MNIST, so the honest answer of the conversion exercise gets full marks. (The suite's one
    run of this solution: tests/exercises leaves it to this test.)"""
    student = tmp_path / "class" / "frank"
    student.mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "solutions", "ex05_conversion.ipynb"), student)
    report = grade(
        tmp_path / "class", tmp_path / "out", "--jobs", "1", "--timeout", "300", timeout=600
    )["first"]["frank"]
    assert (
        report["status"] == "ok"
        and report["errors"] == []
        and report["results"][0]["score"] == report["results"][0]["max_score"] == 6
        and report["results"][0]["passed"]
    ), json.dumps(report)[:3000]
