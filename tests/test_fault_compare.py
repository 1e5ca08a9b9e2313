"""One worker killed under Ray Train with a failure policy (``hvdcourse.course.fault_compare``): the
worker group restarts from the last checkpoint Ray registered and finishes, the kill happens once,
the times and the epochs lost come out of the run, no Ray process is left; and the recorded table
of the three systems (book/data/fault_compare.json) is a complete record of runs that behaved."""

import json
import os
import uuid

import pytest

from conftest import ROOT
from hvdcourse.course import fault_compare
from hvdcourse.course.faults import first_time
from hvdcourse.runtime import processes

EPOCHS, STEPS, KILL_STEP = 3, 5, 8  # worker 1 dies in epoch 2, after epoch 1's checkpoint
MARKER = "HVDCOURSE_TEST_FAULT_COMPARE"
RECORD = os.path.join(ROOT, "book", "data", "fault_compare.json")


@pytest.fixture(scope="module")
def ray_outcome(tmp_path_factory):
    token = uuid.uuid4().hex
    os.environ[MARKER] = token  # every process of the run inherits it
    try:
        outcome = fault_compare.ray_train(
            str(tmp_path_factory.mktemp("ray-fault")), EPOCHS, STEPS, KILL_STEP
        )
        left = [p.pid for p in processes.with_env(MARKER, token)]  # right after the run
        yield outcome, left
    finally:
        os.environ.pop(MARKER, None)
        processes.end_all(lambda: processes.with_env(MARKER, token))


def test_ray_restarts_the_worker_group_and_finishes(ray_outcome):
    outcome, _ = ray_outcome
    assert outcome.ok, outcome.details
    assert outcome.workers == "2 -> 2"
    assert outcome.final_accuracy is not None and outcome.final_accuracy > 0.2  # chance: 0.1


def test_the_restart_resumes_from_a_checkpoint_taken_before_the_kill(ray_outcome):
    outcome, _ = ray_outcome
    # epoch 1's checkpoint, or none yet registered (Ray Train V2 registers a report a little later)
    resumed_from = outcome.details["resumed_from_epoch"]
    assert resumed_from in (0, 1), outcome.details
    assert outcome.epochs_lost == pytest.approx((KILL_STEP - resumed_from * STEPS) / STEPS)


def test_times_to_detect_and_recover_are_measured(ray_outcome):
    outcome, _ = ray_outcome
    assert outcome.detect_seconds is not None and outcome.detect_seconds >= 0
    assert outcome.recover_seconds is not None and outcome.recover_seconds > 0


def test_no_ray_process_survives_the_run(ray_outcome):
    _, left = ray_outcome
    assert left == [], f"the Ray run left processes behind: {left}"


def test_a_fault_guarded_by_a_file_happens_once(tmp_path):
    marker = str(tmp_path / "killed.json")
    assert first_time(marker, {"rank": 1}) is True
    assert first_time(marker, {"rank": 1}) is False
    with open(marker) as fh:
        assert json.load(fh)["rank"] == 1


def test_the_recorded_table_holds_three_runs_that_behaved_with_their_machine():
    with open(RECORD) as fh:
        recorded = json.load(fh)
    systems = [o["system"] for o in recorded["outcomes"]]
    assert systems == ["Horovod (mpirun)", "Horovod Elastic", "Ray Train"]
    assert all(o["ok"] for o in recorded["outcomes"])
    assert {"cpu_model", "logical_cores", "load_average_1_5_15min", "date"} <= set(
        recorded["machine"]
    )
    table = fault_compare.table(recorded["outcomes"])
    assert table.notna().all().all(), table  # every cell measured
    elastic = recorded["outcomes"][1]
    assert elastic["workers"].startswith("2 -> 1 -> 2")  # went on alone, then grew back
