"""Finding and ending processes (hvdcourse/runtime/processes.py): by environment marker, by pid,
orphans included; SIGTERM first, SIGKILL for a process that ignores it."""

import os
import subprocess
import sys
import time

import pytest

from hvdcourse.runtime import processes

IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"


def start_orphan(marker: str, code: str = "import time; time.sleep(120)") -> None:
    """A sleeper started by a shell that exits at once: re-parented, it keeps only its environment."""
    env = dict(os.environ, HVDCOURSE_TEST_MARK=marker)
    subprocess.run(["bash", "-c", f"{sys.executable} -c '{code}' &"], env=env, timeout=30)


def found(marker, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs = processes.with_env("HVDCOURSE_TEST_MARK", marker)
        if procs:
            return procs
        time.sleep(0.1)
    return []


def test_an_orphan_is_found_by_its_environment_marker_and_ended():
    marker = f"orphan-{os.getpid()}"
    start_orphan(marker)
    procs = found(marker)
    assert len(procs) == 1 and "time.sleep(120)" in processes.describe(procs)[0][1]
    assert processes.end(procs, grace=5) == []
    assert processes.with_env("HVDCOURSE_TEST_MARK", marker) == []


@pytest.mark.timeout(
    120
)  # ends the test if end() never returns; its time is the machine's business
def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period():
    marker = f"stubborn-{os.getpid()}"
    start_orphan(marker, IGNORES_TERM)
    procs = found(marker)
    time.sleep(0.5)  # let it install its handler
    start = time.monotonic()
    assert processes.end(procs, grace=1) == []
    assert time.monotonic() - start >= 1  # it waited the grace period before SIGKILL


def test_end_all_repeats_until_nothing_is_found_and_counts():
    marker = f"many-{os.getpid()}"
    for _ in range(3):
        start_orphan(marker)
    deadline = time.monotonic() + 10
    while (
        len(processes.with_env("HVDCOURSE_TEST_MARK", marker)) < 3 and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert processes.end_all(lambda: processes.with_env("HVDCOURSE_TEST_MARK", marker)) == 3
    assert processes.with_env("HVDCOURSE_TEST_MARK", marker) == []


def test_an_empty_marker_value_matches_nothing_and_gone_pids_are_skipped():
    assert processes.with_env("HVDCOURSE_TEST_MARK", "") == []
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert processes.by_pid([proc.pid]) == []
