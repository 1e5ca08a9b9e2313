"""Horovod on Ray: ``train_ray_hvd`` runs ``train_hvd.py`` unchanged on 2 Ray workers (Ray Train V1's
``HorovodTrainer``): Horovod's own allreduce keeps both ranks' weights identical, the driver reports
the run once, and no process of the Ray instance it started is left when it returns."""

import os
import re
import subprocess
import uuid

import pytest

from conftest import PYTHON
from hvdcourse.runtime import processes, results
from test_train_ray import RUN_MARKER, ray_processes

# one epoch of 10 steps of 2 x 32 images: the mechanism is under test, not the accuracy
QUICK = ["--workers", "2", "--epochs", "1", "--max-steps", "10", "--batch-size", "32"]
RANK_LINE = re.compile(
    r"\[train_hvd\] rank=(\d) test_loss=\S+ test_accuracy=\S+ weights_sha256=(\w+)"
)


@pytest.fixture(scope="module")
def hvd_run(tmp_path_factory):
    cwd = str(tmp_path_factory.mktemp("ray-hvd"))
    folder, marker = results.new_folder(), uuid.uuid4().hex
    env = {**os.environ, results.VARIABLE: folder, RUN_MARKER: marker, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        proc = subprocess.run(
            [PYTHON, "-m", "hvdcourse.examples.train_ray_hvd", *QUICK, "--checkpoint-dir", "ckpt"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
        )
        left = [p.pid for p in ray_processes(marker)]  # right after the script returned
        records = results.collect(folder, 1)[0] or []
        yield proc, records, left, cwd
    finally:
        processes.end_all(lambda: processes.with_env(RUN_MARKER, marker))
        results.remove_folder(folder)


def test_horovod_ranks_run_as_ray_workers_and_end_identical(hvd_run):
    proc, records, _, _ = hvd_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    digests = dict(RANK_LINE.findall(proc.stdout + proc.stderr))
    assert sorted(digests) == ["0", "1"], (proc.stdout + proc.stderr)[-3000:]
    assert digests["0"] == digests["1"]  # Horovod's allreduce, not Ray, kept them equal
    (final,) = [r for r in records if r.get("kind") == "final"]  # the driver reports once
    assert final["workers"] == 2 and final["weights_sha256"] == digests["0"]
    assert final["accuracy"] > 0.2  # chance: 0.1


def test_rank_0_checkpoints_into_the_checkpoint_dir(hvd_run):
    proc, _, _, cwd = hvd_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    # the relative --checkpoint-dir is the driver's folder, not the one Ray runs the workers in
    assert "ckpt-1.index" in os.listdir(os.path.join(cwd, "ckpt"))


def test_no_ray_process_survives_the_script(hvd_run):
    proc, _, left, _ = hvd_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert left == [], f"train_ray_hvd left Ray processes behind: {left}"
