"""The interconnect check's arithmetic (hvdcourse.course.lessons.bandwidth): sizes, bus bandwidth as NCCL's
tests define it, the ring model's fit, the report. Its run across two nodes is in
tests/slurm/test_slurm_jobs.py."""

import pytest

from hvdcourse.course.lessons import bandwidth
from hvdcourse.course.check import envcheck
from hvdcourse.runtime.errors import UsageError


def test_sizes_are_read_in_bytes_kib_and_mib():
    assert bandwidth.parse_sizes("4K,1M, 64MiB,1000") == (4096, 2**20, 64 * 2**20, 1000)
    assert [bandwidth.format_size(s) for s in (4096, 2**20, 1000)] == ["4 KiB", "1 MiB", "1000 B"]


@pytest.mark.parametrize("text", ["4X", "6", "0", "-4K"])
def test_a_size_that_is_not_a_float32_message_is_refused(text):
    with pytest.raises(UsageError, match="--sizes"):
        bandwidth.parse_size(text)


def test_default_sizes_go_from_4_kib_to_64_mib():
    assert bandwidth.DEFAULT_SIZES[0] == 4096 and bandwidth.DEFAULT_SIZES[-1] == 64 * 2**20


@pytest.mark.parametrize("ranks, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_is_the_algorithm_bandwidth_times_2_n_minus_1_over_n(ranks, factor):
    assert bandwidth.bus_bandwidth(10.0, ranks) == pytest.approx(10.0 * factor)


def test_the_ring_model_fit_recovers_alpha_and_beta():
    alpha, beta, n = 5e-6, 1 / 12.5e9, 4
    sizes = bandwidth.DEFAULT_SIZES
    seconds = [2 * (n - 1) * alpha + 2 * (n - 1) / n * s * beta for s in sizes]
    fit_alpha, fit_beta = bandwidth.fit_ring_model(sizes, seconds, n)
    assert fit_alpha == pytest.approx(alpha, rel=1e-3) and fit_beta == pytest.approx(beta, rel=1e-3)
    assert bandwidth.fit_ring_model(sizes, seconds, 1) is None


def test_times_that_do_not_grow_with_the_size_leave_beta_unresolved():
    _, beta = bandwidth.fit_ring_model([4096, 2**20], [8e-3, 7e-3], 2)
    assert beta is None


def test_one_rank_is_reported_as_no_link_with_the_command_for_several_nodes():
    result = {
        "rank": 0,
        "ranks": 1,
        "nodes": 1,
        "hosts": ["login1"],
        "tensors": "host memory (CPU)",
        "ops": "Gloo",
        "iters": 3,
        "rows": [(4096, 1e-5, 4096 / 1e-5, 0.0)],
    }
    lines = bandwidth.report_lines(result)
    assert lines[0].startswith("# allreduce (sum, float32) with Horovod: 1 rank(s) on 1 node(s)")
    assert lines[2].split() == ["4", "KiB", "10.0", "0.410", "0.000"]
    assert "no link measured" in lines[-1] and "srun --nodes=2 --ntasks-per-node=1" in lines[-1]


def test_bandwidth_options_without_the_check_are_a_usage_error():
    with pytest.raises(UsageError, match="go with --allreduce-bandwidth"):
        envcheck.check(["--sizes", "4K"])


def test_a_slow_rate_keeps_three_significant_digits_and_no_exponent():
    from hvdcourse.course.lessons.bandwidth import format_gbps

    assert format_gbps(4096 / 8278.8e-6) == "0.000495"  # 4 KiB in 8.3 ms on a loaded machine
    assert format_gbps(0.05e9) == "0.0500" and format_gbps(12.3456e9) == "12.346"
    assert format_gbps(0.0) == "0.000"
