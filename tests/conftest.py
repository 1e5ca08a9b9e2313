"""Shared fixtures: the repository root, the venv's Python, offline data, a clean process table."""

from __future__ import annotations

import functools
import glob
import http.server
import os
import subprocess
import sys
import tarfile
import threading
import time

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
    from hvdcourse.course.faults import kill_processes, leftover_processes

    stop_book_build()  # still running only if the session ended early

    wait = float(os.environ.get("HVDCOURSE_LEFTOVER_WAIT", "15"))  # seconds for stragglers to exit
    left = leftover_processes(SESSION_MARKER, os.environ[SESSION_MARKER], wait=wait)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [
        f"FAILED: {len(left)} process(es) started by the tests outlived the session "
        "(a test or fixture did not clean up); they are killed now:"
    ]
    lines += [f"  pid {pid}: {cmd}" for pid, cmd in left]
    for line in lines:
        reporter.write_line(line, red=True) if reporter else print(line)
    kill_processes(pid for pid, _ in left)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- Headless Chromium (Debian's, never a downloaded one) for the browser tests ---
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


# --- The built book (tests/book): built once per session by the same command as ``make book`` ---
# The build is one process that executes the lessons one after another (about 15 minutes on 2 quiet
# cores when every page executes), and much of its time and the other tests' is spent waiting (process
# starts, rendezvous, sleeps). So the build starts in the background as soon as the tests are
# collected, and the tests that need the book run last, when it is done (measured: about 23 minutes
# beside the other tests, and the whole suite 42 minutes instead of 53). Its processes carry the
# session's marker like every other one, and a session that ends early stops it.
BUILD = os.path.join(ROOT, "_build", "html")
BUILD_LOG = os.path.join(ROOT, "_build", "book-build.log")
BUILD_TIMEOUT = 3000  # seconds: the build shares the machine with the other tests
BUILD_MARKER = "HVDCOURSE_BOOK_BUILD"  # the build's processes, to stop them all (kernels, engines)
_book_build: dict = {}


def start_book_build() -> None:
    if _book_build:
        return
    os.makedirs(os.path.dirname(BUILD_LOG), exist_ok=True)
    log = open(BUILD_LOG, "w")
    _book_build["log"] = log
    _book_build["marker"] = os.urandom(8).hex()
    _book_build["proc"] = subprocess.Popen(
        [PYTHON, "-m", "hvdcourse.course.book.book_build", "--timeout", str(BUILD_TIMEOUT)],
        cwd=ROOT,
        env={**os.environ, BUILD_MARKER: _book_build["marker"]},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _book_build["started"] = time.monotonic()


def stop_book_build() -> None:
    if not _book_build:
        return
    from hvdcourse.runtime import processes

    processes.end_all(lambda: processes.with_env(BUILD_MARKER, _book_build["marker"]))
    _book_build["proc"].wait()
    _book_build["log"].close()


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(session, config, items):
    book = [item for item in items if "built_book" in getattr(item, "fixturenames", ())]
    if book and not config.option.collectonly:
        items[:] = [item for item in items if item not in book] + book
        start_book_build()


@pytest.fixture(scope="session")
def built_book():
    """The HTML book, built by the same command as ``make book`` (started by the collection, above).

    The build executes only what changed since the last one (myst-nb's cache; see
    ``hvdcourse.course.book.book_build``): after ``make book`` it executes no lesson and takes seconds; after a
    change to a lesson, the package or its data it executes what that change affects.
    """
    start_book_build()  # (a test that asked for the book when the collection did not see it)
    proc = _book_build["proc"]
    left = BUILD_TIMEOUT + 60 - (time.monotonic() - _book_build["started"])
    try:
        proc.wait(timeout=max(left, 1))
    except subprocess.TimeoutExpired:
        stop_book_build()
    with open(BUILD_LOG) as fh:
        log = fh.read()
    assert proc.returncode == 0, f"book build failed or hung (log: {BUILD_LOG}):\n" + log[-6000:]
    return {"html": BUILD, "log": log}


@pytest.fixture(scope="session")
def book_url(built_book):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=built_book["html"])
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# --- Horovod's source, for the tests of the course's patches ---
@pytest.fixture(scope="session")
def horovod_source(tmp_path_factory):
    """Horovod 0.28.1's source, unpacked as the set-up gets it (pip download from the registry); one
    download for the session (tests/test_stack.py, tests/test_gpu_route.py)."""
    folder = tmp_path_factory.mktemp("horovod-src")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            str(folder),
            "horovod==0.28.1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"pip download horovod==0.28.1 failed (registry needed):\n{proc.stderr[-2000:]}"
    )
    with tarfile.open(glob.glob(str(folder / "horovod-0.28.1.tar.gz"))[0]) as tar:
        tar.extractall(folder, filter="data")
    return folder / "horovod-0.28.1"
