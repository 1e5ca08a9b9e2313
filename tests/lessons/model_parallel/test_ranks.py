"""hvdcourse.course.lessons.model_parallel on 2 MPI ranks: every exactness claim of the lesson, checked by
running ``python -m hvdcourse.course.lessons.model_parallel.check`` under mpirun (the course's launcher)."""

import pytest

from conftest import PYTHON
from hvdcourse.runtime.launch import run_ranks

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


_RUNS: dict = {}  # the same command runs once per module; its tests read its records


def run_check(*args, np_=2):
    """Every rank's record, rank 0's first; the run must succeed (made once per arguments)."""
    if (args, np_) not in _RUNS:
        _RUNS[args, np_] = _run_check(*args, np_=np_)
    return _RUNS[args, np_]


def _run_check(*args, np_=2):
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.course.lessons.model_parallel.check", *args],
        np=np_,
        launcher="mpirun",
        timeout=120,
        env=ONE_THREAD,
    )
    assert run.ok, run.output[-3000:]
    records = [run.rank_results(rank)[-1] for rank in range(np_)]
    assert all(r["ok"] for r in records), records
    return records


def test_tensor_parallel_block_gives_the_reference_outputs_and_gradients_on_2_ranks():
    for record in run_check("tensor", "--hidden", "8", "--ffn", "16"):
        assert record["size"] == 2
        assert set(record["max_abs_diff"]) == {"y", "dx", "dW1", "db1", "dW2", "db2"}
        assert max(record["max_abs_diff"].values()) < 1e-12


def test_tensor_parallel_block_communicates_once_forward_and_once_backward():
    for record in run_check("tensor", "--hidden", "8", "--ffn", "16"):
        assert (record["allreduces_forward"], record["allreduces_backward"]) == (1, 1)
        # each allreduce carries one (batch 4, hidden 8) float64 array
        assert record["bytes_forward"] == record["bytes_backward"] == 4 * 8 * 8


def test_tensor_parallel_rank_keeps_half_of_the_split_matrices():
    record = run_check("tensor", "--hidden", "8", "--ffn", "16")[0]
    split = 8 * 16 + 16 + 16 * 8  # W1, b1, W2 are split; b2 (8) is kept whole
    assert record["full_params"] == split + 8
    assert record["shard_params"] == split // 2 + 8


def test_tensor_parallel_inner_size_not_divisible_by_ranks_is_a_clear_error():
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.course.lessons.model_parallel.check", "tensor", "--ffn", "15"],
        np=2,
        launcher="mpirun",
        timeout=120,
        env=ONE_THREAD,
    )
    assert run.returncode == 2, run.output[-2000:]
    assert "inner size 15 is not divisible by 2 ranks" in run.output


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("micro_batches", [1, 2, 8])
def test_pipeline_step_gives_the_gradients_and_loss_of_the_whole_batch(schedule, micro_batches):
    records = run_check(
        "pipeline", "--schedule", schedule, "--micro-batches", str(micro_batches), "--batch", "8"
    )
    assert all(r["max_abs_diff_grads"] < 1e-12 for r in records)
    last = records[-1]
    assert last["loss"] == pytest.approx(last["reference_loss"], abs=1e-12)


def test_1f1b_holds_fewer_micro_batches_than_gpipe():
    # the runs of the exactness test above (batch 8, 8 micro-batches of one row)
    gpipe = run_check("pipeline", "--schedule", "gpipe", "--micro-batches", "8", "--batch", "8")
    one_f_one_b = run_check(
        "pipeline", "--schedule", "1f1b", "--micro-batches", "8", "--batch", "8"
    )
    assert [r["held_max"] for r in gpipe] == [8, 8]
    assert [r["held_max"] for r in one_f_one_b] == [2, 1]  # p - s micro-batches on stage s


def test_zero1_updates_equal_plain_data_parallel_updates_on_2_ranks():
    for record in run_check("zero", "--parameters", "1001", "--steps", "5"):
        assert len(record["max_abs_diff"]) == 5
        assert max(record["max_abs_diff"]) <= 1e-6
        assert record["ranks_agree"]


def test_zero1_on_one_rank_is_plain_adam():
    (record,) = run_check("zero", "--parameters", "37", "--steps", "3", np_=1)
    assert record["max_abs_diff"] == [0.0, 0.0, 0.0]
    assert record["state_bytes"]["zero1"] == record["state_bytes"]["data parallel"] == 2 * 37 * 4


def test_zero1_halves_the_optimizer_state_per_rank_on_2_ranks():
    record = run_check("zero", "--parameters", "1000", "--steps", "1")[0]
    assert record["state_bytes"] == {"data parallel": 2 * 1000 * 4, "zero1": 2 * 500 * 4}
    measured = record["state_bytes_measured"]
    # what tracemalloc saw allocated: the moments plus small Python objects
    assert 8000 <= measured["data parallel"] < 8000 + 2000
    assert 4000 <= measured["zero1"] < 4000 + 2000


def test_measured_bubble_shrinks_with_more_micro_batches():
    # Asserted on the step replayed with each operation's measured compute (CPU) time, which other
    # work on the machine does not change; the wall-clock idle share ("measured", what lesson 13
    # plots) also counts the time a stage was descheduled, so it is reported, not asserted.
    (record, _) = run_check(
        "bubble", "--micro-batches", "1", "8", "--width", "256", "--batch", "256"
    )
    one, eight = record["bubble"]
    assert one["formula"] == pytest.approx(0.5) and eight["formula"] == pytest.approx(1 / 9)
    # with one micro-batch a stage waits for the other's whole pass: about half of the step
    assert 0.3 < one["replayed"] < 0.7, record["bubble"]
    assert eight["replayed"] < one["replayed"] / 2, record["bubble"]
    assert all(0 <= row["measured"] < 1 for row in (one, eight)), record["bubble"]
