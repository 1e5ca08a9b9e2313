"""hvdcourse.course.lessons.ring: the mpi4py ring allreduce agrees with numpy and Horovod; the cost model's properties."""

import math
import re

import numpy as np
import pytest

from conftest import PYTHON
from hvdcourse.course.lessons import ring
from hvdcourse.runtime.launch import run_ranks


def run_ring_check(np_, *args, launcher="mpirun"):
    """The ``[ring] ...`` report of every rank (found anywhere: mpirun may merge the ranks' lines)."""
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.course.lessons.ring", *args],
        np=np_,
        launcher=launcher,
        timeout=120,
    )
    assert run.ok, run.output[-3000:]
    return re.findall(
        r"\[ring\] rank=\d+ size=\d+ length=\d+ numpy_match=\w+(?: horovod_match=\w+ horovod_size=\d+)?",
        run.output,
    )


# ----------------------------------------------------------------------------- with MPI


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_ring_sum_matches_numpy_on_1_2_and_3_ranks(ranks):
    lines = run_ring_check(ranks, "--length", "10")
    assert len(lines) == ranks
    assert all("numpy_match=True" in line for line in lines)


def test_ring_handles_fewer_elements_than_ranks():
    lines = run_ring_check(3, "--length", "2")
    assert len(lines) == 3 and all("numpy_match=True" in line for line in lines)


def test_ring_average_matches_numpy_mean():
    lines = run_ring_check(3, "--length", "7", "--average")
    assert len(lines) == 3 and all("numpy_match=True" in line for line in lines)


def test_ring_sums_integers_exactly():
    lines = run_ring_check(2, "--length", "5", "--dtype", "int32")
    assert len(lines) == 2 and all("numpy_match=True" in line for line in lines)


@pytest.mark.parametrize("ranks", [2, 3])
def test_ring_matches_horovod_allreduce(ranks):
    lines = run_ring_check(ranks, "--length", "11", "--horovod")
    assert len(lines) == ranks
    assert all("numpy_match=True" in line and "horovod_match=True" in line for line in lines)


# ----------------------------------------------------------------------------- without MPI


@pytest.mark.parametrize("size, length", [(1, 5), (2, 8), (3, 10), (4, 3), (5, 17), (7, 100)])
def test_simulated_ring_gives_every_rank_the_sum(size, length):
    arrays = [ring.rank_data(r, length) for r in range(size)]
    results = ring.simulate_ring_allreduce(arrays)
    for result in results:
        np.testing.assert_allclose(result, np.sum(arrays, axis=0), rtol=1e-12)


def test_simulated_ring_keeps_the_input_shape_and_leaves_inputs_untouched():
    arrays = [np.arange(12.0).reshape(3, 4) * (r + 1) for r in range(3)]
    before = [a.copy() for a in arrays]
    results = ring.simulate_ring_allreduce(arrays, average=True)
    assert results[0].shape == (3, 4)
    np.testing.assert_allclose(results[2], np.arange(12.0).reshape(3, 4) * 2)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))


def test_chunks_cover_the_array_and_differ_by_at_most_one():
    bounds = ring.chunk_bounds(10, 3)
    assert bounds == [(0, 4), (4, 7), (7, 10)]
    sizes = [b - a for a, b in ring.chunk_bounds(1001, 7)]
    assert sum(sizes) == 1001 and max(sizes) - min(sizes) <= 1


def test_schedule_has_2_n_minus_1_steps_with_one_send_per_rank_each():
    size = 5
    schedule = ring.ring_schedule(size)
    steps = {(s["phase"], s["step"]) for s in schedule}
    assert len(steps) == 2 * (size - 1) == ring.ring_steps(size)
    for rank in range(size):
        sent = [s["send"] for s in schedule if s["rank"] == rank]
        assert len(sent) == 2 * (size - 1)


# ----------------------------------------------------------------------------- cost model

ALPHA, BETA = 2e-6, 1 / 25e9  # 2 us latency, 25 GB/s link


def test_ring_cost_is_the_textbook_formula():
    n, workers = 100e6, 8
    expected = 2 * 7 * ALPHA + 2 * 7 / 8 * n * BETA
    assert math.isclose(ring.ring_time(n, workers, ALPHA, BETA), expected)


def test_ring_bandwidth_term_stays_below_twice_the_message():
    sent = [ring.ring_bytes_sent(1.0, n) for n in range(1, 1025)]
    assert all(a <= b for a, b in zip(sent, sent[1:])) and max(sent) < 2.0


def test_parameter_server_time_grows_linearly_with_workers():
    t = [ring.parameter_server_time(100e6, n, ALPHA, BETA) for n in (8, 16, 32)]
    assert math.isclose(t[1] / t[0], 2.0) and math.isclose(t[2] / t[1], 2.0)


def test_one_parameter_server_takes_2N_alpha_plus_n_beta():
    assert math.isclose(
        ring.parameter_server_time(100e6, 8, ALPHA, BETA), 2 * 8 * (ALPHA + 100e6 * BETA)
    )


def test_parameter_servers_as_many_as_workers_cost_about_what_the_ring_costs():
    n, workers = 100e6, 64
    sharded = ring.parameter_server_time(n, workers, ALPHA, BETA, servers=workers)
    assert math.isclose(sharded, 2 * workers * ALPHA + 2 * n * BETA)
    assert 1.0 < sharded / ring.ring_time(n, workers, ALPHA, BETA) < 1.05


def test_overlapped_push_and_pull_with_enough_servers_beat_the_ring():
    n, workers = 100e6, 64
    overlapped = ring.parameter_server_time(n, workers, 0.0, BETA, servers=workers, overlap=True)
    assert math.isclose(overlapped, n * BETA)  # the paper's max(M/B, nM/(kB)) at k = n
    assert overlapped < ring.ring_time(n, workers, 0.0, BETA)


def test_more_servers_than_workers_do_not_shrink_a_workers_own_traffic():
    n = 100e6
    assert math.isclose(ring.parameter_server_time(n, 4, 0.0, BETA, servers=16), 2 * n * BETA)


def test_byteps_time_is_the_ring_without_cpu_machines_and_the_servers_with_as_many():
    n, workers = 100e6, 16
    assert math.isclose(
        ring.byteps_time(n, workers, 0, BETA), ring.ring_time(n, workers, 0.0, BETA)
    )
    assert math.isclose(
        ring.byteps_time(n, workers, workers, BETA),
        ring.parameter_server_time(n, workers, 0.0, BETA, servers=workers, overlap=True),
    )
    between = [ring.byteps_time(n, workers, k, BETA) for k in range(workers + 1)]
    assert all(a > b for a, b in zip(between, between[1:]))


def test_byteps_time_refuses_more_cpu_than_gpu_machines():
    with pytest.raises(ValueError, match="0 <= CPU machines"):
        ring.byteps_time(1e6, 4, 5, BETA)


def test_ring_beats_parameter_server_and_naive_for_large_messages():
    n = 100e6
    for workers in (4, 16, 128):
        ring_t = ring.ring_time(n, workers, ALPHA, BETA)
        assert ring_t < ring.parameter_server_time(n, workers, ALPHA, BETA)
        assert ring_t < ring.naive_time(n, workers, ALPHA, BETA)
        assert ring_t < ring.tree_time(n, workers, ALPHA, BETA)


def test_tree_beats_ring_for_tiny_messages_on_many_workers():
    assert ring.tree_time(8, 128, ALPHA, BETA) < ring.ring_time(8, 128, ALPHA, BETA)


def test_one_worker_communicates_nothing():
    for name in ("ring", "naive (reduce + broadcast)", "binomial tree"):
        assert ring.ALGORITHMS[name](1e6, 1, ALPHA, BETA) == 0.0


def test_cost_table_has_one_row_per_algorithm_and_one_value_per_worker_count():
    table = ring.cost_table(1e6, [2, 4, 8], ALPHA, BETA)
    assert set(table) == set(ring.ALGORITHMS) and all(len(v) == 3 for v in table.values())


def test_zero_workers_are_refused():
    with pytest.raises(ValueError, match="at least one worker"):
        ring.ring_time(1.0, 0, ALPHA, BETA)


def test_trace_ends_with_every_rank_holding_every_complete_chunk():
    label, table = ring.ring_trace(4)[-1]
    assert label == "allgather step 3"
    assert all(cell == (0, 1, 2, 3) for row in table for cell in row)


def test_trace_after_reduce_scatter_rank_r_owns_chunk_r_plus_1():
    size = 5
    _, table = ring.ring_trace(size)[size - 1]
    for rank in range(size):
        complete = [c for c, who in enumerate(table[rank]) if len(who) == size]
        assert complete == [(rank + 1) % size]


@pytest.mark.parametrize("name", ["ring", "parameter server", "binomial tree"])
def test_the_fit_finds_the_alpha_and_beta_that_made_the_times(name):
    cost = ring.ALGORITHMS[name]
    sizes = [4096 * 4**k for k in range(6)] * 3
    workers = [2] * 6 + [3] * 6 + [4] * 6
    times = [cost(n, w, 30e-6, 1 / 2e9) for n, w in zip(sizes, workers)]
    fit = ring.fit_alpha_beta(cost, sizes, workers, times)
    assert fit["alpha"] == pytest.approx(30e-6) and fit["beta"] == pytest.approx(1 / 2e9)
    assert fit["median_relative_error"] < 1e-9
