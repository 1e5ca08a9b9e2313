"""Lesson 5's checkpoint-order run: what rank 0's ModelCheckpoint(save_best_only=True) judges on."""

import sys

import pytest

from hvdcourse.course.lessons.checkpoint_order import saved_epochs
from hvdcourse.runtime.launch import run_ranks


def improvements(losses):
    """The epochs (1-based) at which ``losses`` reached a new minimum: what save_best_only saves."""
    best, epochs = float("inf"), []
    for epoch, loss in enumerate(losses, start=1):
        if loss < best:
            best, epochs = loss, epochs + [epoch]
    return epochs


def test_saved_epochs_reads_the_epoch_of_each_tf_checkpoint(tmp_path):
    for name in (
        "before-01.index",
        "before-03.index",
        "before-03.data-00000-of-00001",
        "after-02.index",
        "checkpoint",
    ):
        (tmp_path / name).write_text("")
    assert saved_epochs(str(tmp_path), "before") == [1, 3]
    assert saved_epochs(str(tmp_path), "after") == [2]


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("checkpoint-order")
    run = run_ranks(
        [
            sys.executable,
            "-m",
            "hvdcourse.course.lessons.checkpoint_order",
            "--out",
            str(out / "ckpt"),
            "--epochs",
            "3",
            "--train-images",
            "512",
            "--test-images",
            "200",
        ],
        np=2,
        launcher="gloo",
        timeout=300,
        cwd=str(out),
    )
    assert run.ok, run.output[-2000:]
    return run.records("checkpoint_order")[0]


def test_checkpoint_before_the_averaging_judges_on_rank_0s_own_loss(record):
    assert record["saved_before"] == improvements(record["val_loss_own"][0])


def test_checkpoint_after_the_averaging_judges_on_the_mean_over_ranks(record):
    assert record["saved_after"] == improvements(record["val_loss_averaged"])
    mean = [sum(losses) / len(losses) for losses in zip(*record["val_loss_own"])]
    assert record["val_loss_averaged"] == pytest.approx(mean, rel=1e-5)
