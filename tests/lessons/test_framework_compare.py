"""The three-framework comparison (hvdcourse/course/lessons/framework_compare.py): rows from the ranks' final
records, the table's speed-up, and the Keras trainer's timing on a real run."""

import pytest

from hvdcourse.course.lessons import framework_compare as fc
from hvdcourse.runtime.errors import RunFailed, UsageError
from hvdcourse.runtime.launch import RankRun


def fake_run(finals, timing=None, returncode=0, seconds=12.34):
    """A finished RankRun whose ranks reported ``finals`` (and, for Keras, ``timing``)."""
    results = []
    for rank, final in enumerate(finals):
        records = [{"kind": "final", "rank": rank, **final}]
        if timing is not None:
            records.append({"kind": "timing", "rank": rank, **timing})
        results.append(records)
    return RankRun(["x"], returncode, "out", seconds, False, results=results)


def final(digest="aaa", accuracy=0.91234, images=1000.0, seconds=2.0):
    return {
        "accuracy": accuracy,
        "loss": 0.3,
        "weights_sha256": digest,
        "images_per_second": images,
        "train_seconds": seconds,
    }


def test_a_row_takes_rank_0s_figures_and_compares_every_ranks_weights():
    row = fc.row("torch-hvd", 2, fake_run([final(), final()]))
    assert row == {
        "framework": "PyTorch + Horovod",
        "ranks": 2,
        "images/s": 1000.0,
        "train s": 2.0,
        "wall s": 12.3,
        "test accuracy": 0.9123,
        "identical weights": True,
    }
    assert not fc.row("torch-ddp", 2, fake_run([final("aaa"), final("bbb")]))["identical weights"]


def test_the_keras_timing_record_supplies_the_keras_rows_throughput():
    keras_final = {"accuracy": 0.9, "weights_sha256": "k"}  # train_hvd reports no timing itself
    run = fake_run([keras_final], timing={"images_per_second": 512.0, "train_seconds": 3.5})
    row = fc.row("keras-hvd", 1, run)
    assert (row["images/s"], row["train s"]) == (512.0, 3.5)


def test_a_failed_run_or_a_missing_final_record_raises_with_the_runs_last_lines():
    with pytest.raises(RunFailed, match="PyTorch DDP on 2 rank"):
        fc.row("torch-ddp", 2, fake_run([final(), final()], returncode=1))
    with pytest.raises(RunFailed, match="1 of 2 final records"):
        fc.row("torch-ddp", 2, fake_run([final()]))


def test_the_table_orders_frameworks_as_listed_and_divides_by_the_same_frameworks_1_rank_row():
    rows = [
        fc.row("torch-ddp", 2, fake_run([final(images=1500.0)] * 2)),
        fc.row("torch-ddp", 1, fake_run([final(images=1000.0)])),
        fc.row("torch-hvd", 2, fake_run([final(images=900.0)] * 2)),
    ]
    table = fc.table(rows)
    assert list(table.index) == [("PyTorch + Horovod", 2), ("PyTorch DDP", 1), ("PyTorch DDP", 2)]
    assert table.loc[("PyTorch DDP", 2), "speed-up"] == 1.5
    assert table.loc[("PyTorch DDP", 1), "speed-up"] == 1.0
    assert table["speed-up"].isna().tolist() == [True, False, False]  # no 1-rank Horovod row


def test_an_empty_comparison_says_what_to_do():
    with pytest.raises(UsageError, match="run at least one framework"):
        fc.table([])


def test_the_keras_trainer_reports_its_training_time_like_the_pytorch_ones(tmp_path):
    args = ["--epochs", "2", "--max-steps", "3", "--batch-size", "16", "--threads", "1"]
    run = fc.run("keras-hvd", 1, args, timeout=240, cwd=str(tmp_path))
    row = fc.row("keras-hvd", 1, run)
    # images/s counts the second epoch: 3 steps of 16 images
    (timing,) = run.records("timing")
    assert row["images/s"] == timing["images_per_second"] > 0
    assert row["train s"] >= 3 * 16 / row["images/s"]


def test_a_ray_train_row_comes_from_the_drivers_one_final_record():
    record = {**final(images=700.0), "workers": 2, "identical_weights": True}
    row = fc.row("torch-ray", 2, fake_run([record]))  # one record for 2 workers: the driver's
    assert (row["framework"], row["ranks"], row["images/s"]) == ("PyTorch + Ray Train", 2, 700.0)
    assert row["identical weights"] is True
    with pytest.raises(RunFailed, match="0 of 1 final records"):
        fc.row("keras-ray", 2, fake_run([]))


def test_a_ray_train_driver_is_one_process_told_how_many_workers_to_start():
    command = fc.program(fc.lookup("keras-ray"), ["--epochs", "1"], np=2)
    assert command[1:] == [
        "-m",
        "hvdcourse.examples.train_ray_tf",
        "--workers",
        "2",
        "--epochs",
        "1",
    ]
    mwms = fc.program(fc.lookup("keras-mwms"), [], np=2)
    assert mwms[mwms.index("--trainer") + 1] == "train_mwms" and "--cluster" in mwms
    with pytest.raises(UsageError, match="unknown framework"):
        fc.lookup("jax")


@pytest.mark.parametrize(
    "cmdline, kind",
    [
        ("ray::RayTrainWorker.run_train_fn", "workers"),
        ("ray::TrainController", "Ray Train controller"),
        (
            "/venv/bin/python /venv/lib/ray/_private/workers/default_worker.py --raylet-name=x",
            "Ray idle workers",
        ),
        ("/venv/lib/ray/core/src/ray/raylet/raylet --node-ip-address=127.0.0.1", "Ray daemons"),
        ("/venv/lib/ray/core/src/ray/gcs/gcs_server --gcs_server_port=1", "Ray daemons"),
        ("python -m hvdcourse.examples.train_ray_tf --workers 2", "Ray driver (the script)"),
        ("/venv/bin/python /venv/bin/horovodrun --gloo -np 2 python -m x", "launcher"),
        ("python -m hvdcourse.course.lessons.framework_compare --keras-rank train_hvd", "workers"),
        ("ray::DatasetManager", "Ray Train's other actors"),
        ("ray::DashboardAgent", "Ray daemons"),
        (
            "/venv/lib/ray/core/src/ray/raylet/raylet --python_worker_command=x default_worker.py",
            "Ray daemons",
        ),
        ("bash", "other"),
    ],
)
def test_each_process_of_a_run_is_put_in_its_group(cmdline, kind):
    assert fc.process_kind(cmdline) == kind


def test_the_cpu_sampler_counts_a_busy_child_process_as_what_it_is():
    """Event-driven, not timed: the child burns 0.6 CPU seconds, says so, and stays alive until the
    sampler has read it twice more, so a busy machine only makes the test slower."""
    import subprocess
    import sys
    import time

    busy = (
        "import sys, time\nend = time.process_time() + 0.6\n"
        "while time.process_time() < end: pass\nprint('done', flush=True)\nsys.stdin.read()"
    )
    with fc.CPUSampler(interval=0.05) as cpu:
        child = subprocess.Popen(
            [sys.executable, "-c", busy, "hvdcourse.examples.train_x"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout.readline().strip() == "done"
            seen, deadline = len(cpu.series), time.monotonic() + 120
            while len(cpu.series) < seen + 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            child.communicate(timeout=60)
    totals = cpu.totals()
    assert totals["workers"]["processes"] == 1, totals
    assert 0.6 <= totals["workers"]["cpu s"] < 1.5, totals
    # a busy loop gets at least a tenth of a core even on a machine loaded 20 times over
    assert cpu.cores_while_busy(at_least=0.1)["workers"] > 0.1
