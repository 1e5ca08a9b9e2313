"""The custom-loop Horovod trainer (DistributedGradientTape): identical weights on 2 ranks, its warm-up."""

import pytest

from conftest import PYTHON
from hvdcourse.runtime.launch import run_ranks
from hvdcourse.examples.train_tape import warmup_lr


def test_two_ranks_end_with_bit_identical_weights_and_rank_0_checkpoints(tmp_path):
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.examples.train_tape",
            "--epochs",
            "2",
            "--max-steps",
            "5",
            "--batch-size",
            "32",
            "--no-resume",
            "--checkpoint-dir",
            "ckpt",
        ],
        np=2,
        launcher="gloo",
        timeout=300,
        cwd=str(tmp_path),
    )
    assert run.ok, run.output[-3000:]
    digests = {r["rank"]: r["weights_sha256"] for r in run.records("final")}
    assert sorted(digests) == [0, 1], run.output[-2000:]
    assert digests[0] == digests[1]
    assert run.output.count("[train_tape] epoch 1/2") == 1  # logged by rank 0 only
    assert (tmp_path / "ckpt" / "ckpt-2.index").exists()


def test_warmup_starts_at_the_single_worker_rate():
    assert warmup_lr(0, lr=4e-3, workers=4, warmup_steps=40) == pytest.approx(1e-3)


def test_warmup_is_linear_and_reaches_the_scaled_rate():
    assert warmup_lr(20, lr=4e-3, workers=4, warmup_steps=40) == pytest.approx(2.5e-3)
    assert warmup_lr(40, lr=4e-3, workers=4, warmup_steps=40) == pytest.approx(4e-3)
    assert warmup_lr(100, lr=4e-3, workers=4, warmup_steps=40) == pytest.approx(4e-3)


def test_no_warmup_steps_means_the_scaled_rate_from_the_start():
    assert warmup_lr(0, lr=4e-3, workers=4, warmup_steps=0) == pytest.approx(4e-3)
