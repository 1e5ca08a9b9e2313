"""The suite's part ``ray`` (hvdcourse/course/bench/side_by_side.py): one row per trainer, batch and
size, a failed run recorded without stopping the others, Ray Train's ratios at 2 workers and the
source's three tables."""

import pytest

from hvdcourse.course.lessons import framework_compare
from hvdcourse.course.bench import side_by_side as sbs
from hvdcourse.runtime.launch import RankRun


def row(key, np, batch, images, seconds=2.0, wall=10.0, accuracy=0.9):
    return {
        "framework": framework_compare.lookup(key).label,
        "ranks": np,
        "images/s": images,
        "train s": seconds,
        "wall s": wall,
        "test accuracy": accuracy,
        "identical weights": True,
        "key": key,
        "batch": batch,
    }


ROWS = [
    row("keras-hvd", 2, 32, 1000.0, wall=10.0),
    row("keras-mwms", 2, 32, 800.0, wall=12.0),
    row("keras-ray", 2, 32, 900.0, wall=40.0),
    row("keras-ray", 1, 32, 600.0, accuracy=0.95),
    {"framework": "PyTorch DDP", "ranks": 2, "key": "torch-ddp", "batch": 32, "error": "timed out"},
]


def test_ray_trains_ratios_divide_ray_at_2_workers_by_each_peer_at_2_workers():
    found = {r["ratio"]: r for r in sbs.ratios(ROWS)}
    assert found["ray_vs_hvd_keras"]["images_per_s"] == 0.9
    assert found["ray_vs_mwms_keras"]["images_per_s"] == 1.125
    assert found["ray_vs_hvd_keras"]["wall_seconds"] == 4.0
    # a failed or missing run gives no ratio rather than a wrong one
    assert found["ray_vs_ddp_torch"]["images_per_s"] is None
    assert found["ray_vs_hvd_torch"]["images_per_s"] is None


def test_the_three_tables_have_frameworks_as_rows_and_batch_and_workers_as_columns():
    (time, _), (accuracy, acc), (rate, images) = sbs.tables({"results": ROWS})
    assert (time, accuracy, rate) == ("Training time (s)", "Test accuracy", "Images per second")
    assert list(images.index) == ["Keras + Horovod", "Keras + MWMS", "Keras + Ray Train"]
    assert images.loc["Keras + Ray Train", (32, 1)] == 600.0
    assert acc.loc["Keras + Ray Train", (32, 1)] == 0.95
    assert "PyTorch DDP" not in images.index  # its run failed


def test_a_failed_run_is_recorded_and_the_others_still_run(monkeypatch):
    def fake_run(key, np, args, timeout, cwd):
        if key == "torch-ray":
            return RankRun(["x"], 1, "line 1\nRay failed\n", 3.0, False, results=[None])
        finals = [{"kind": "final", "accuracy": 0.9, "weights_sha256": "a"}]
        timing = {"kind": "timing", "images_per_second": 100.0, "train_seconds": 1.0}
        return RankRun(["x"], 0, "", 3.0, False, results=[[*finals, timing]] * np)

    monkeypatch.setattr(framework_compare, "run", fake_run)
    rows = sbs.measure(("keras-hvd", "torch-ray"), batches=(8,), workers=(1,), log=lambda *a: None)
    assert [r["key"] for r in rows] == ["keras-hvd", "torch-ray"]
    assert rows[0]["images/s"] == 100.0 and "error" not in rows[0]
    assert "PyTorch + Ray Train on 1 rank(s) failed" in rows[1]["error"]
    assert rows[1]["output_tail"][-1] == "Ray failed"
    assert len(rows[0]["load_average_before"]) == 3


@pytest.mark.parametrize("batch", [32, 128])
def test_every_trainer_gets_the_same_options(batch):
    args = sbs.train_args(batch)
    assert args[args.index("--batch-size") + 1] == str(batch)
    assert args[args.index("--epochs") + 1] == str(sbs.EPOCHS)
