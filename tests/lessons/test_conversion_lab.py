"""The measurements behind lesson 5: contiguous blocks, bytes held per loading strategy."""

import numpy as np
import pytest

from hvdcourse.course.lessons import conversion_lab
from hvdcourse.course.lessons.conversion_lab import block, held_bytes, memory_study


@pytest.mark.parametrize("n,size", [(1437, 2), (1437, 7), (60_000, 7), (5, 8)])
def test_blocks_cover_every_item_once(n, size):
    parts = [np.arange(n)[block(n, r, size)] for r in range(size)]
    assert np.array_equal(np.concatenate(parts), np.arange(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_held_bytes_counts_the_array_kept_not_the_temporaries():
    def load():
        temporary = np.ones(1_000_000)  # 8 MB, freed on return
        return (temporary[:1000] * 2).astype(np.uint8)  # a 1000-byte copy survives

    held, kept = held_bytes(load)
    assert kept.nbytes == 1000
    assert 1000 <= held < 10_000


def test_a_rank_reading_its_own_file_holds_its_shard_not_the_whole_set(tmp_path):
    rows = {
        r["strategy"]: r
        for r in memory_study(rank=0, size=2, workdir=str(tmp_path), barrier=lambda: None)
    }
    whole = rows["(one uint8 copy of all training images)"]["bytes"]
    own = rows["own file per rank (uint8)"]["bytes"]
    assert own == pytest.approx(whole / 2, rel=0.01)
    assert rows["load all, then shard (train_hvd)"]["bytes"] > 4 * whole  # uint8 + float32 copies


def test_linear_rule_multiplies_and_sqrt_rule_takes_the_square_root():
    from hvdcourse.course.lessons.conversion_lab import scaled_lr

    assert scaled_lr("unscaled", 1e-3, 4) == pytest.approx(1e-3)
    assert scaled_lr("scaled", 1e-3, 4) == pytest.approx(4e-3)
    assert scaled_lr("scaled+warmup", 1e-3, 4) == pytest.approx(4e-3)
    assert scaled_lr("sqrt-scaled", 1e-3, 4) == pytest.approx(2e-3)


def test_an_unknown_scaling_rule_is_refused_with_the_choices():
    from hvdcourse.course.lessons.conversion_lab import scaled_lr

    with pytest.raises(ValueError, match="sqrt-scaled"):
        scaled_lr("cubic", 1e-3, 4)


def test_printed_metrics_reads_a_keras_epoch_line():
    from hvdcourse.course.lessons.conversion_lab import printed_metrics

    line = "5/5 - 26s - loss: 2.2682 - accuracy: 0.1406 - val_loss: 2.2073 - val_accuracy: 0.3426 - 26s/epoch - 5s/step"
    assert printed_metrics(line) == {
        "loss": 2.2682,
        "accuracy": 0.1406,
        "val_loss": 2.2073,
        "val_accuracy": 0.3426,
    }


def test_keras_prints_the_averaged_epoch_metrics_and_each_rank_keeps_its_own(tmp_path):
    """(The same tiny run takes the warm-up schedule and the batch-normalisation study through the
    lab's code, which the "going further" page reads from a record of the full lab.)"""
    import json
    import sys

    from hvdcourse.course.lessons.conversion_lab import printed_metrics
    from hvdcourse.runtime.launch import run_ranks

    out = tmp_path / "views.json"
    run = run_ranks(
        [
            sys.executable,
            "-m",
            "hvdcourse.course.lessons.conversion_lab",
            "--out",
            str(out),
            "--configs",
            "scaled+warmup",
            "--seeds",
            "1",
            "--epochs",
            "1",
            "--max-steps",
            "3",
            "--no-memory",
            "--metric-views",
            "--batch-norm-batches",
            "2",
        ],
        np=2,
        launcher="gloo",
        timeout=300,
    )
    assert run.ok, run.output[-3000:]
    written = json.load(open(out))
    assert {(r["config"], r["epoch"]) for r in written["epochs"]} == {("scaled+warmup", 1)}
    assert sorted(row["rank"] for row in written["batch_norm"]) == [0, 1]
    views = written["metric_views"]
    own, averaged = views["own"], views["averaged"]
    assert own[0]["loss"] != own[1]["loss"]
    assert averaged["loss"] == pytest.approx((own[0]["loss"] + own[1]["loss"]) / 2, rel=1e-6)
    shown = printed_metrics(views["printed"])
    assert all(
        shown[k] == pytest.approx(averaged[k], abs=6e-5)
        for k in ("loss", "accuracy", "val_loss", "val_accuracy")
    )
    assert views["last_batch"]["loss"] == pytest.approx(own[0]["loss"])


def test_the_lab_trains_on_the_first_n_training_images_or_all_of_them():
    import types

    import numpy as np

    images = np.arange(10 * 28 * 28, dtype=np.uint8).reshape(10, 28, 28)
    dataset = types.SimpleNamespace(x_train=images, y_train=np.arange(10))
    x, y = conversion_lab.training_images(dataset, 4)
    assert len(x) == 4 and list(y) == [0, 1, 2, 3]
    assert len(conversion_lab.training_images(dataset)[0]) == 10
    with pytest.raises(ValueError, match="between 1 and 10"):
        conversion_lab.training_images(dataset, 11)


def test_a_train_images_count_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        conversion_lab.main(["--out", "x.json", "--train-images", "0"])
    assert stop.value.code == 2 and "--train-images must be at least 1" in capsys.readouterr().err
