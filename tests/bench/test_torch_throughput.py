"""hvdcourse.course.bench.torch_throughput: the PyTorch runs are timed like the Keras ones (tiny runs)."""

import numpy as np
import pytest

from conftest import PYTHON
from hvdcourse.course.bench.torch_throughput import memory_batches, parser
from hvdcourse.runtime.launch import run_ranks

TINY = ["--batch-size", "8", "--warmup-steps", "1", "--steps", "3", "--repeats", "2"]


def test_memory_batches_give_full_batches_even_from_few_images():
    x, y = np.zeros((5, 28, 28), np.uint8), np.arange(5)
    batches = memory_batches(x, y, batch_size=8)
    assert len(batches) == 1
    images, labels = batches[0]
    assert tuple(images.shape) == (8, 1, 28, 28) and tuple(labels.shape) == (8,)


def test_memory_batches_are_distinct_and_at_most_eight():
    x = np.arange(100 * 28 * 28, dtype=np.uint8).reshape(100, 28, 28)
    batches = memory_batches(x, np.arange(100), batch_size=10)
    assert len(batches) == 8
    assert [int(labels[0]) for _, labels in batches] == list(range(0, 80, 10))


def test_the_options_the_suite_passes_are_the_keras_benchmarks_less_the_progress_bar():
    from hvdcourse.course.bench.suite import QUICK, TORCH_HVD_GLOO

    args = parser().parse_args(TORCH_HVD_GLOO.argv(QUICK))
    assert (args.mode, args.threads, args.bind, args.groups) == ("torch-hvd", 1, "core", 1)
    assert "--fit-verbose" not in TORCH_HVD_GLOO.argv(QUICK)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "mode,ranks,launcher",
    [("torch", 1, "python"), ("torch-hvd", 2, "gloo"), ("ddp", 2, "torchrun")],
)
def test_each_mode_reports_one_timing_per_repeat_from_rank_0(mode, ranks, launcher):
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.course.bench.torch_throughput",
            "--mode",
            mode,
            *TINY,
            "--bind",
            "core",
        ],
        np=ranks,
        launcher=launcher,
        timeout=240,
    )
    assert run.ok, run.output[-3000:]
    (result,) = run.results[0]
    assert run.results[1:] == [None] * (ranks - 1)  # only rank 0 reports
    assert result["mode"] == mode and result["ranks"] == ranks and result["framework"] == "pytorch"
    assert len(result["seconds"]) == 2 and all(s > 0 for s in result["seconds"])
    assert result["median_images_per_s"] == pytest.approx(np.median(result["images_per_s"]))
    assert result["global_batch"] == 8 * ranks and result["intra_op_threads"] == 1
    assert result["core_of_rank0"] == 0
