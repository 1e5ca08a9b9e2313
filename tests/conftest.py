"""Shared fixtures: the repository root, the venv's Python, offline data, a clean process table."""

from __future__ import annotations

import functools
import glob
import http.server
import os
import signal
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

    stop_background_runs()  # still running only if the session ended early

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


# --- Long runs in the background: the built book (tests/book) and the course's container image ---
# (tests/test_container.py). Each is one command whose processes spend much of their time waiting
# (process starts, rendezvous, downloads, unpacking), as do the other tests'. So each starts as soon
# as the tests are collected, runs beside the other tests, and the tests that need it run last and
# wait for it (measured for the book: about 23 minutes beside the other tests, and the whole suite 42
# minutes instead of 53). Their processes carry the session's marker like every other one and one of
# their own, and a session that ends early stops them.
class BackgroundRun:
    """A command started in its own session, its output in ``log``; ``wait()`` gives its exit code,
    stopping it once ``timeout`` seconds have passed since it started."""

    def __init__(self, name: str, argv: list, log: str, timeout: float):
        self.name, self.argv, self.log, self.timeout = name, argv, log, timeout
        self.marker = f"HVDCOURSE_BG_{name.upper()}"
        self.proc = None

    def start(self) -> None:
        if self.proc is not None:
            return
        os.makedirs(os.path.dirname(self.log), exist_ok=True)
        self._log = open(self.log, "w")
        self._value = os.urandom(8).hex()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env={**os.environ, self.marker: self._value},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started = time.monotonic()

    def wait(self) -> int:
        self.start()
        left = self.timeout - (time.monotonic() - self.started)
        try:
            self.proc.wait(timeout=max(left, 1))
        except subprocess.TimeoutExpired:
            self.stop()
        return self.proc.returncode

    def output(self) -> str:
        with open(self.log) as fh:
            return fh.read()

    def stop(self) -> None:
        if self.proc is None:
            return
        from hvdcourse.runtime import processes

        if self.proc.poll() is None:
            try:  # SIGTERM first: the command's own clean-up runs (the container check's containers)
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=120)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        processes.end_all(lambda: processes.with_env(self.marker, self._value))
        self.proc.wait()
        self._log.close()


BUILD = os.path.join(ROOT, "_build", "html")
BUILD_TIMEOUT = 3000  # seconds: the build shares the machine with the other tests
BOOK_BUILD = BackgroundRun(
    "book_build",
    [PYTHON, "-m", "hvdcourse.course.book.book_build", "--timeout", str(BUILD_TIMEOUT)],
    os.path.join(ROOT, "_build", "book-build.log"),
    BUILD_TIMEOUT + 60,
)
# a cold image build (new set-up inputs) takes 8 minutes on 2 quiet cores, 30 at load 20-30; with the
# image reused, the check takes 84 s (measured)
CONTAINER_CHECK = BackgroundRun(
    "container_check",
    ["bash", os.path.join(ROOT, "tools", "container_check.sh")],
    os.path.join(ROOT, "_build", "container-check.log"),
    3600,
)
BACKGROUND = {"container_check": CONTAINER_CHECK, "built_book": BOOK_BUILD}


def stop_background_runs() -> None:
    for run in BACKGROUND.values():
        run.stop()


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(session, config, items):
    if config.option.collectonly:
        return
    waiting = []
    for fixture, run in BACKGROUND.items():
        needing = [item for item in items if fixture in getattr(item, "fixturenames", ())]
        if needing:
            items[:] = [item for item in items if item not in needing]
            waiting += needing
            run.start()
    # last, in the order above: the image's tests, then the book's (the longer run)
    items += waiting


@pytest.fixture(scope="session")
def built_book():
    """The HTML book, built by the same command as ``make book`` (started by the collection, above).

    The build executes only what changed since the last one (myst-nb's cache; see
    ``hvdcourse.course.book.book_build``): after ``make book`` it executes no lesson and takes seconds; after a
    change to a lesson, the package or its data it executes what that change affects.
    """
    code = BOOK_BUILD.wait()
    log = BOOK_BUILD.output()
    assert code == 0, f"book build failed or hung (log: {BOOK_BUILD.log}):\n" + log[-6000:]
    return {"html": BUILD, "log": log}


@pytest.fixture(scope="session")
def container_check():
    """``make container-check``'s exit code and output (tools/container_check.sh: the image built or
    reused, then smoke-tested; started by the collection, above)."""
    return CONTAINER_CHECK.wait(), CONTAINER_CHECK.output()


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
