"""hvdcourse.course.bench.allreduce: sizes, bus bandwidth and correct sums on 2 ranks (tiny sizes)."""

import pytest

from conftest import PYTHON
from hvdcourse.course.bench.allreduce import bus_bandwidth, iterations_for, message_sizes
from hvdcourse.runtime.launch import run_ranks


def test_sizes_go_from_4_kb_to_64_mb_by_factors_of_4():
    sizes = message_sizes()
    assert sizes[0] == 4096 and sizes[-1] == 64 * 2**20
    assert all(b == 4 * a for a, b in zip(sizes, sizes[1:]))


def test_bus_bandwidth_counts_2_n_minus_1_over_n_of_the_bytes():
    assert bus_bandwidth(1000, 1.0, 2) == 1000
    assert bus_bandwidth(1000, 1.0, 4) == 1500


def test_small_messages_are_timed_in_batches_large_ones_alone():
    assert iterations_for(4096) == 200
    assert iterations_for(64 * 2**20) == 2


@pytest.mark.parametrize(
    "launcher,impls", [("mpirun", ["mpi4py", "mpi4py-inplace", "ring", "ps"]), ("gloo", ["hvd"])]
)
def test_every_implementation_sums_correctly_on_2_ranks(launcher, impls):
    args = [a for impl in impls for a in ("--impl", impl)]
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.course.bench.allreduce",
            *args,
            "--max-bytes",
            "16384",
            "--repeats",
            "2",
        ],
        np=2,
        launcher=launcher,
        timeout=180,
    )
    assert run.ok, run.output[-2000:]
    found = run.results[0]
    assert [d["impl"] for d in found] == impls
    for doc in found:
        assert doc["correct"] and doc["ranks"] == 2
        assert [row["bytes"] for row in doc["rows"]] == [4096, 16384]
