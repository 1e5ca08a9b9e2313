"""``hvdcourse.course.lessons.fault_compare``: the kill happens once, and the recorded table of the three
systems (book/data/fault_compare.json) is a complete record of runs that behaved.

The live run (one worker of 2 killed under Ray Train with a failure policy: the worker group restarts
from the last checkpoint Ray registered and finishes, the times and the epochs lost come out of the
run, no Ray process is left) is executed and asserted once, by lesson 15 in the book build
(tests/book): running it here as well would cost CI another minute for the same checks."""

import json
import os

from conftest import ROOT
from hvdcourse.course.lessons import fault_compare
from hvdcourse.course.lessons.faults import first_time

RECORD = os.path.join(ROOT, "book", "data", "fault_compare.json")


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
