"""hvdcourse.course.bench.throughput: what is timed, binding, data, and a tiny run per mode."""

import subprocess

import numpy as np
import pytest

from conftest import PYTHON
from hvdcourse.course.bench.throughput import images_per_second, local_rank, memory_dataset
from hvdcourse.runtime.launch import run_ranks
from hvdcourse.examples.train_mwms import launch_local_workers

TINY = ["--batch-size", "8", "--warmup-steps", "1", "--steps", "3", "--repeats", "2"]


def test_images_per_second_counts_every_rank():
    assert images_per_second([2.0], steps=10, batch=32, ranks=2) == [320.0]


def test_local_rank_comes_from_the_launcher():
    assert local_rank({"OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == 1
    assert local_rank({}) == 0


def test_memory_dataset_gives_full_batches_even_from_few_images():
    x, y = np.zeros((5, 28, 28, 1), np.float32), np.arange(5)
    xb, yb = next(iter(memory_dataset(x, y, batch_size=8)))
    assert xb.shape == (8, 28, 28, 1) and yb.shape == (8,)


def test_bind_core_pins_the_process_to_one_core():
    code = (
        "import os; from hvdcourse.course.bench.throughput import bind_to_core; "
        "core = bind_to_core(1); print(sorted(os.sched_getaffinity(0)) == [core])"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def tiny_run(mode, ranks, launcher):
    argv = ["--mode", mode, *TINY, "--bind", "core"]
    if mode == "mwms":
        return launch_local_workers("hvdcourse.course.bench.throughput", ranks, argv, timeout=240)
    return run_ranks(
        [PYTHON, "-m", "hvdcourse.course.bench.throughput", *argv],
        np=ranks,
        launcher=launcher,
        timeout=240,
    )


@pytest.mark.parametrize(
    "mode,ranks,launcher", [("keras", 1, "python"), ("hvd", 2, "gloo"), ("mwms", 2, None)]
)
def test_each_mode_reports_one_timing_per_repeat_from_rank_0(mode, ranks, launcher):
    run = tiny_run(mode, ranks, launcher)
    assert run.ok, run.output[-3000:]
    (result,) = run.results[0]
    assert run.results[1:] == [None] * (ranks - 1)  # only rank 0 reports
    assert result["mode"] == mode and result["ranks"] == ranks
    assert len(result["seconds"]) == 2 and all(s > 0 for s in result["seconds"])
    assert result["median_images_per_s"] == pytest.approx(np.median(result["images_per_s"]))
    assert result["global_batch"] == 8 * ranks


def test_solo_mode_trains_independent_processes_and_counts_both():
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.course.bench.throughput", "--mode", "solo", *TINY],
        np=2,
        launcher="mpirun",
        timeout=240,
    )
    assert run.ok, run.output[-3000:]
    (result,) = run.results[0]
    assert result["mode"] == "solo" and result["ranks"] == 2 and result["global_batch"] == 16
