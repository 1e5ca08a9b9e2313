"""Shared fixtures: the repository root, the venv's Python, offline data, a clean process table."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


@pytest.fixture
def run_dir(tmp_path):
    """A fresh working directory for a multi-rank run."""
    return str(tmp_path)


# --- No course process may outlive the test session (lesson: Faults, hangs and elastic training) ---
# Every process a test starts (launchers, ranks, orted, Slurm daemons, ipyparallel engines, kernels)
# inherits this marker, even once orphaned; at the very end of the session, after every fixture has
# been torn down, any process still carrying it was left behind: it is listed, killed, and the
# session fails.
SESSION_MARKER = "HVDCOURSE_TEST_SESSION"
os.environ[SESSION_MARKER] = f"{os.getpid()}-{os.urandom(4).hex()}"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    from hvdcourse.faults import kill_processes, leftover_processes

    wait = float(os.environ.get("HVDCOURSE_LEFTOVER_WAIT", "15"))  # seconds for stragglers to exit
    left = leftover_processes(SESSION_MARKER, os.environ[SESSION_MARKER], wait=wait)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"FAILED: {len(left)} process(es) started by the tests outlived the session "
             "(a test or fixture did not clean up); they are killed now:"]
    lines += [f"  pid {pid}: {cmd}" for pid, cmd in left]
    for line in lines:
        reporter.write_line(line, red=True) if reporter else print(line)
    kill_processes(pid for pid, _ in left)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
