"""hvdcourse.launch: multi-process runs always end, and leave no process behind."""
import time

import psutil

from conftest import PYTHON
from hvdcourse.launch import run_ranks

SLEEPER = "import os, time; print('rank up', os.getpid(), flush=True); time.sleep(600)"


def test_hanging_ranks_are_killed_at_the_timeout():
    start = time.monotonic()
    run = run_ranks([PYTHON, "-c", SLEEPER], np=2, launcher="mpirun", timeout=8)
    assert run.timed_out and run.returncode == 124
    assert time.monotonic() - start < 30
    assert "TIMEOUT" in run.output


def test_no_rank_survives_a_timeout():
    run = run_ranks([PYTHON, "-c", SLEEPER], np=2, launcher="mpirun", timeout=8)
    pids = [int(line.split()[-1]) for line in run.output.splitlines() if line.startswith("rank up")]
    assert len(pids) == 2
    time.sleep(1)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_output_is_capped():
    run = run_ranks([PYTHON, "-c", "print('x' * 100000)"], np=1, launcher="python", timeout=30, max_output=1000)
    assert run.ok and len(run.output) <= 1000


def test_unknown_launcher_is_refused():
    import pytest
    with pytest.raises(ValueError, match="choose one of"):
        run_ranks(["true"], np=2, launcher="ssh")
