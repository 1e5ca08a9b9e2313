"""hvdcourse.course.lessons.dp_scale on 2 Horovod ranks: the accumulation equality of the lesson, and that the
measurements run and keep the ranks identical (``python -m hvdcourse.course.lessons.dp_scale.check`` under
mpirun, the course's launcher)."""

from conftest import PYTHON
from hvdcourse.runtime.launch import run_ranks


def run_check(*args):
    """Every rank's record, rank 0's first; the run must succeed."""
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.course.lessons.dp_scale.check", *args],
        np=2,
        launcher="mpirun",
        timeout=300,
    )
    assert run.ok, run.output[-3000:]
    records = [run.rank_results(rank)[-1] for rank in range(2)]
    assert all(r["ok"] and r["size"] == 2 for r in records), records
    return records


def test_k_averaged_accumulated_batches_equal_one_step_of_a_k_times_larger_batch_on_2_ranks():
    records = run_check("accumulation", "--k", "4", "--micro-batch", "8")
    for record in records:
        assert record["global_batch"] == 4 * 8 * 2
        assert record["update"] > 1e-3  # the step moved the weights: the equality is not trivial
        assert record["averaged"] < 1e-6
        # without averaging the accumulated gradient is k times larger: the step of k times the rate
        assert record["summed"] > 100 * record["averaged"] and record["summed"] > record["update"]
        assert record["summed_vs_k_lr"] < 1e-6
    assert records[0] == {**records[1], "rank": 0}


def test_fp16_compression_halves_the_payload_and_stays_within_float16_rounding():
    for record in run_check("compression"):
        none, fp16 = record["none"], record["fp16"]
        assert none["payload"] == 4 * (1000 + 300 + 7) and fp16["payload"] == none["payload"] // 2
        assert none["max_abs_error"] < 1e-6 < fp16["max_abs_error"] < 1e-2
        assert none["seconds"] > 0 and fp16["seconds"] > 0


def test_training_with_fp16_compression_keeps_the_ranks_identical():
    records = run_check("training", "--compression", "fp16", "--max-steps", "5")
    assert records[0]["weights_sha256"] == records[1]["weights_sha256"]
    assert records[0]["steps"] == 5 and records[0]["global_batch"] == 64
    assert 0 <= records[0]["accuracy"] <= 1
