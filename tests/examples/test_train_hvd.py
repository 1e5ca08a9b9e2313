"""The Horovod trainer on 2 ranks: identical weights, a stated accuracy, rank-0-only checkpoints."""

import json
import os

import pytest

from conftest import PYTHON, ROOT
from hvdcourse.examples.data import load_mnist
from hvdcourse.runtime.launch import run_ranks

HELPER = os.path.join(ROOT, "tests", "helpers", "in_rank_dir.py")
# On the offline MNIST subset (8,000 training images) these settings reach about 95% test accuracy.
QUICK = [
    "--epochs",
    "2",
    "--batch-size",
    "32",
    "--lr",
    "2e-3",
    "--warmup-epochs",
    "1",
    "--no-resume",
]
MIN_ACCURACY = 0.90
# The other launchers prove what depends on the launcher (identical weights, rank-0-only files and
# logs) in a few steps: the same options, 5 steps per epoch.
SHORT = [*QUICK, "--max-steps", "5"]


def train_on_two_ranks(launcher, cwd, options=QUICK):
    program = [
        PYTHON,
        HELPER,
        "hvdcourse.examples.train_hvd",
        *options,
        "--checkpoint-dir",
        "ckpt",
        "--metrics-json",
        "metrics.json",
    ]
    run = run_ranks(program, np=2, launcher=launcher, timeout=300, cwd=cwd)
    assert run.ok, run.output[-3000:]
    return run


def rank_results(run):
    """``{rank: (accuracy, weights digest)}`` that each rank reported at the end."""
    return {r["rank"]: (r["accuracy"], r["weights_sha256"]) for r in run.records("final")}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The one full 2-epoch training (under mpirun), for the accuracy claims."""
    cwd = str(tmp_path_factory.mktemp("mpirun"))
    return "mpirun", cwd, train_on_two_ranks("mpirun", cwd)


@pytest.fixture(scope="module", params=["gloo", "mpi", "mpirun"])
def two_rank_run(request, tmp_path_factory):
    if request.param == "mpirun":
        return request.getfixturevalue("full_run")
    cwd = str(tmp_path_factory.mktemp(request.param))
    return request.param, cwd, train_on_two_ranks(request.param, cwd, SHORT)


def test_both_ranks_end_with_bit_identical_weights(two_rank_run):
    _, _, run = two_rank_run
    results = rank_results(run)
    assert sorted(results) == [0, 1], run.output[-2000:]
    assert results[0][1] == results[1][1]


def test_reaches_stated_accuracy_on_offline_data(full_run):
    _, cwd, run = full_run
    metrics = json.load(open(os.path.join(cwd, "rank0", "metrics.json")))
    assert metrics["workers"] == 2
    assert metrics["accuracy"] >= MIN_ACCURACY, metrics


def test_accuracy_is_measured_on_the_whole_test_set(two_rank_run):
    _, cwd, _ = two_rank_run  # (also after a few steps: the evaluation does not depend on them)
    metrics = json.load(open(os.path.join(cwd, "rank0", "metrics.json")))
    # all test images, not one rank's half
    assert metrics["examples"] == len(load_mnist(quiet=True).x_test)


def test_only_rank_0_wrote_checkpoints_and_metrics(two_rank_run):
    _, cwd, _ = two_rank_run
    assert any(f.startswith("ckpt-") for f in os.listdir(os.path.join(cwd, "rank0", "ckpt")))
    assert not os.path.exists(os.path.join(cwd, "rank1", "ckpt"))
    assert not os.path.exists(os.path.join(cwd, "rank1", "metrics.json"))


def test_only_rank_0_logs_epochs(two_rank_run):
    _, _, run = two_rank_run
    assert run.output.count("Epoch 1/2") == 1


def test_single_worker_trainer_runs_with_plain_python(tmp_path):
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.examples.train_single",
            "--epochs",
            "1",
            "--max-steps",
            "5",
            "--checkpoint-dir",
            "ckpt",
        ],
        np=1,
        launcher="python",
        timeout=180,
        cwd=str(tmp_path),
    )
    assert run.ok, run.output[-2000:]
    assert "weights_sha256=" in run.output


def test_bad_argument_gets_a_usage_message_not_a_traceback(tmp_path):
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.examples.train_hvd", "--epochs", "0"],
        np=1,
        launcher="python",
        timeout=60,
        cwd=str(tmp_path),
    )
    assert run.returncode == 2
    assert "must be a positive integer" in run.output and "Traceback" not in run.output
