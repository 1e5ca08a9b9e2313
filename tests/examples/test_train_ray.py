"""The Ray Train scripts: 2 workers train the course's model (MWMS under TensorflowTrainer, DDP under
TorchTrainer), the driver reports test accuracy, time and images/s once, and no process of the Ray
instance the script started (raylet, GCS server, ``ray::`` workers) is left when it returns.

The TensorFlow script's 2-worker run is lesson 15's live run in the book build, whose cell asserts
the same of it (2 workers, identical weights, one report per epoch then the final one, accuracy above
chance, images/s), and a Ray process it left would fail the session's leftover check: running it here
as well would cost CI another 90 s for the same checks. The PyTorch script runs here."""

import os
import subprocess
import uuid

import psutil
import pytest

from conftest import PYTHON
from hvdcourse.runtime import processes, results

# 2 epochs of 30 steps of 2 x 32 images: the first runs the warm-up to the doubled rate
QUICK = ["--workers", "2", "--epochs", "2", "--max-steps", "30", "--batch-size", "32"]
QUICK += ["--lr", "2e-3"]
MIN_ACCURACY = 0.6  # measured: 0.8-0.9 after these 60 steps (chance: 0.1)
SCRIPTS = {"tf": "hvdcourse.examples.train_ray_tf", "torch": "hvdcourse.examples.train_ray_torch"}
# every process this test's run starts inherits it (Ray's processes too: they start from the script)
RUN_MARKER = "HVDCOURSE_TEST_RAY_RUN"
RAY_NAMES = ("raylet", "gcs_server", "ray::", "ray:", "log_monitor", "dashboard")


def ray_processes(marker: str) -> list:
    """Live processes of the run ``marker`` that are Ray's (by name or command line)."""
    found = []
    for proc in processes.with_env(RUN_MARKER, marker):
        try:
            text = f"{proc.name()} {' '.join(proc.cmdline())}"
        except psutil.Error:
            continue
        if any(name in text for name in RAY_NAMES):
            found.append(proc)
    return found


@pytest.fixture(scope="module", params=["torch"])  # "tf": lesson 15 (above)
def ray_run(request, tmp_path_factory):
    cwd = str(tmp_path_factory.mktemp(f"ray-{request.param}"))
    folder, marker = results.new_folder(), uuid.uuid4().hex
    env = {**os.environ, results.VARIABLE: folder, RUN_MARKER: marker, "TF_CPP_MIN_LOG_LEVEL": "3"}
    try:
        proc = subprocess.run(
            [PYTHON, "-m", SCRIPTS[request.param], *QUICK, "--checkpoint-dir", "ckpt"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
        )
        # right after the script returned: what of its Ray instance is still alive
        left = [p.pid for p in ray_processes(marker)]
        records = results.collect(folder, 1)[0] or []
        yield request.param, proc, records, left, cwd
    finally:
        processes.end_all(lambda: processes.with_env(RUN_MARKER, marker))
        results.remove_folder(folder)


def final(ray_run) -> dict:
    _, proc, records, _, _ = ray_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    finals = [r for r in records if r.get("kind") == "final"]
    assert len(finals) == 1, records  # the driver reports once, the workers not at all
    return finals[0]


def test_two_workers_train_in_one_collective(ray_run):
    record = final(ray_run)
    assert record["workers"] == 2
    assert record["identical_weights"] is True  # MWMS / DDP kept the two replicas equal


def test_accuracy_time_and_images_per_second_come_back(ray_run):
    record = final(ray_run)
    assert record["accuracy"] >= MIN_ACCURACY, record
    assert record["examples"] > 0 and record["train_seconds"] > 0
    assert record["images_per_second"] > 0
    # one checkpointed report per epoch, then the final one
    assert [h["epoch"] for h in record["history"]] == [1, 2, 2]
    assert record["ray"] == "2.60.0"


def test_no_ray_process_survives_the_script(ray_run):
    name, proc, _, left, _ = ray_run
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert left == [], f"train_ray_{name} left Ray processes behind: {left}"
