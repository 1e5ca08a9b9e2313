"""Shared fixtures: the repository root, the venv's Python, offline data, a clean process table."""

from __future__ import annotations

import functools
import glob
import http.server
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time

import cpu_account
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
# With pytest-xdist the controller makes the marker and its workers keep it (they inherit it), so
# the whole session shares one; the controller checks at the end, when every worker is done (a
# worker cannot: its siblings' runs are still going).
SESSION_MARKER = "HVDCOURSE_TEST_SESSION"


def set_session_marker(config) -> None:
    if not (is_worker(config) and os.environ.get(SESSION_MARKER)):
        os.environ[SESSION_MARKER] = f"{os.getpid()}-{os.urandom(4).hex()}"


def xdist_workers() -> list:
    """Pids of this process's pytest-xdist workers that may still be exiting (execnet's bootstrap)."""
    import psutil

    found = []
    for child in psutil.Process().children():
        try:
            if "sys.stdin.readline()" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    from hvdcourse.course.lessons.faults import kill_processes, leftover_processes

    if is_worker(session.config):
        return
    stop_book_build()  # still running only if the session ended early

    wait = float(os.environ.get("HVDCOURSE_LEFTOVER_WAIT", "15"))  # seconds for stragglers to exit
    left = leftover_processes(
        SESSION_MARKER, os.environ[SESSION_MARKER], wait=wait, exclude=xdist_workers()
    )
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
# starts, rendezvous, sleeps). So the build starts in the background as soon as the session starts,
# and the tests that need the book run last, when it is done. With pytest-xdist (``make test`` runs
# the tests in several worker processes) the controller starts it, before the workers exist, and the
# worker that runs the book's tests waits for the status file the controller writes when it ends.
# Its processes carry the session's marker like every other one, and a session that ends early
# stops it.
BUILD = os.path.join(ROOT, "_build", "html")
BUILD_LOG = os.path.join(ROOT, "_build", "book-build.log")
BUILD_STATUS = os.path.join(ROOT, "_build", "book-build.status")  # "<build id> <exit code>"
# seconds: only ends a hung build (each cell has its own timeout). The build shares the machine with
# the other tests: on 2026-11-26 a clean clone's build executed its 26 pages in about 2,700 s
# beside them (load 5-8), too close to the 3,000 s this was.
BUILD_TIMEOUT = 4200
BUILD_MARKER = "HVDCOURSE_BOOK_BUILD"  # the build's processes, to stop them all (kernels, engines)
BUILD_ID = "HVDCOURSE_BOOK_BUILD_ID"  # the controller's build, named to its workers
_book_build: dict = {}


def is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def is_controller(config) -> bool:
    """True in the process that runs pytest-xdist's workers (``-n N``), not in a worker."""
    return not is_worker(config) and bool(getattr(config.option, "numprocesses", None))


def start_book_build() -> None:
    if _book_build:
        return
    os.makedirs(os.path.dirname(BUILD_LOG), exist_ok=True)
    build_id = os.urandom(8).hex()
    if os.path.exists(BUILD_STATUS):
        os.remove(BUILD_STATUS)
    log = open(BUILD_LOG, "w")
    _book_build.update(log=log, marker=build_id, id=build_id)
    _book_build["proc"] = subprocess.Popen(
        [PYTHON, "-m", "hvdcourse.course.book.book_build", "--timeout", str(BUILD_TIMEOUT)],
        cwd=ROOT,
        env={**os.environ, BUILD_MARKER: build_id},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _book_build["started"] = time.monotonic()
    os.environ[BUILD_ID] = build_id  # the workers, started after this, inherit it

    def write_status():
        # reaped here, with its CPU seconds (tests/cpu_account.py); everyone else waits for `ended`
        proc = _book_build["proc"]
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        cpu_account.book_build_reaped(usage)
        with open(BUILD_STATUS + ".tmp", "w") as fh:
            fh.write(f"{build_id} {code}\n")
        os.replace(BUILD_STATUS + ".tmp", BUILD_STATUS)
        _book_build["ended"].set()

    _book_build["ended"] = threading.Event()
    threading.Thread(target=write_status, daemon=True).start()


def stop_book_build() -> None:
    if not _book_build:
        return
    from hvdcourse.runtime import processes

    processes.end_all(lambda: processes.with_env(BUILD_MARKER, _book_build["marker"]))
    _book_build["ended"].wait()
    _book_build["log"].close()


def book_tests_selected(config) -> bool:
    """Whether the command line's paths include tests/book (the controller does not collect)."""
    book = os.path.join(ROOT, "tests", "book")
    paths = [a.split("::")[0] for a in config.args] or [os.path.join(ROOT, "tests")]
    for path in paths:
        real = os.path.realpath(os.path.join(str(config.invocation_params.dir), path))
        if book == real or book.startswith(real + os.sep) or real.startswith(book + os.sep):
            return True
    return False


def _order_book_last(config, items):
    book = [item for item in items if "built_book" in getattr(item, "fixturenames", ())]
    if book and not config.option.collectonly:
        items[:] = [item for item in items if item not in book] + book
        if not is_worker(config):
            start_book_build()


class _BookLast:
    @pytest.hookimpl(trylast=True)  # after -k and -m have deselected
    def pytest_collection_modifyitems(self, session, config, items):
        _order_book_last(config, items)


def pytest_configure(config):
    set_session_marker(config)  # before anything starts a process
    cpu_account.CpuAccount.register(config)
    config.pluginmanager.register(_BookLast(), "hvdcourse-book-last")
    if is_controller(config) and book_tests_selected(config) and not config.option.collectonly:
        start_book_build()


# Tests that must not run at the same time in two workers share a group (pytest-xdist's
# --dist loadgroup sends a group to one worker); every other test is grouped by its module, so that a
# module's fixtures (its expensive runs) are made once.
XDIST_GROUPS = {
    "slurm": (  # the session's local Slurm cluster, and the module that starts its own
        "tests/slurm/test_slurm_jobs.py",
        "tests/slurm/test_slurm_scripts.py",
        "tests/services/test_slurm_cluster.py",
        "tests/runtime/test_slurm_binding.py",
        "tests/grading/test_slurm_grading.py",
    ),
    # session fixtures made once: Horovod's build report, Horovod's source (pip download)
    "horovod-build": (
        "tests/project/test_stack.py",
        "tests/check/test_envcheck.py",
        "tests/check/test_gpu_route.py",
    ),
    # Prometheus and the node exporter (fixed port 9100 in the playbook's lab)
    "services": ("tests/project/test_ansible_lab.py", "tests/services/test_monitoring.py"),
    # the class hub (the session's ``hub`` fixture): the browser round first, then the servers' tests
    "hub": ("tests/hub/test_class_hub.py", "tests/hub/test_hub.py"),
    # Ray's raylet gives up when the machine is very busy (Ray 2.60: "timed out during startup")
    "ray": (
        "tests/examples/test_train_ray.py",
        "tests/examples/test_train_ray_hvd.py",
        "tests/records/test_fault_compare.py",
    ),
}


# The groups that take longest start first (make test runs --no-loadscope-reorder: the workers take
# the groups in the collection's order), the book's tests last: they wait for the build.
STARTS_FIRST = (
    "tests/project/test_container.py",
    "slurm",
    "tests/grading/test_grader.py",
    "services",
    "ray",
)


# --- What each test needs (the markers in pyproject.toml): `make test-fast` runs those that need none ---
# by fixture: whoever asks for it needs it
NEEDS_BY_FIXTURE = {
    "built_book": "book",
    "book_url": "book",
    "hub": "hub",
    "hub_install": "hub",
    "local_cluster": "slurm",
}
# by module ("tests/x/test_y.py"), or by a module's tests whose names start with a prefix
# ("tests/x/test_y.py::test_prefix"); the CPU account (tests/cpu_account.py) names an unmarked test
# that starts what needs one
NEEDS = {
    "tests/bench/test_allreduce.py": "ranks",
    "tests/bench/test_suite.py::test_quick_suite": "ranks",
    "tests/bench/test_suite.py::test_only_one_part": "ranks",
    "tests/bench/test_suite.py::test_memory_copy": "ranks",
    "tests/bench/test_throughput.py": "ranks",
    "tests/bench/test_torch_throughput.py": "ranks",
    "tests/book/test_book_browser.py": "browser",
    "tests/book/test_book_cache.py": "book",
    "tests/check/test_envcheck.py": "ranks",
    "tests/check/test_gpu_route.py::test_horovod_ranks": "ranks",
    "tests/check/lint/test_lint_run.py": "ranks",
    "tests/classroom/test_classroom.py": "service",
    "tests/examples/test_elastic.py::test_training": "ranks",
    "tests/examples/test_elastic.py::test_survivor": "ranks",
    "tests/examples/test_elastic.py::test_no_step": "ranks",
    "tests/examples/test_faults_bad_input.py::test_corrupt_data": "ranks",
    "tests/examples/test_faults_bad_input.py::test_data_file_with_wrong_arrays": "ranks",
    "tests/examples/test_faults_bad_input.py::test_unwritable": "ranks",
    "tests/examples/test_resume.py": "ranks",
    "tests/examples/test_train_hvd.py": "ranks",
    "tests/examples/test_train_mwms.py": "ranks",
    "tests/examples/test_train_ray.py": "service ranks",
    "tests/examples/test_train_ray_hvd.py": "service ranks",
    "tests/examples/test_train_tape.py": "ranks",
    "tests/examples/test_train_torch.py": "ranks",
    "tests/exercises/test_checks_basic.py": "ranks",
    "tests/exercises/test_checks_scale.py": "ranks",
    "tests/exercises/test_checks_torch.py": "ranks",
    "tests/exercises/test_checks_training.py": "ranks",
    "tests/exercises/test_exercise_notebooks.py": "service ranks",
    "tests/exercises/test_harness.py": "ranks",
    "tests/exercises/test_measure_scaling.py": "ranks",
    "tests/exercises/test_trivial_answers.py": "ranks",
    "tests/grading/test_grader.py": "service ranks",
    "tests/grading/test_hostile.py": "service ranks",
    "tests/grading/test_hostile_nonroot.py": "service ranks",
    "tests/grading/test_robustness.py": "service ranks",
    "tests/grading/test_slurm_grading.py": "slurm",
    "tests/hub/test_private.py": "hub",
    "tests/hub/test_scale.py": "hub",
    "tests/hub/test_class_round.py": "hub",
    "tests/hub/test_hub_slurm.py": "hub slurm",
    "tests/hub/test_class_hub.py": "hub browser",
    "tests/hub/test_hub.py": "hub",
    "tests/lessons/dp_scale/test_dp_scale_ranks.py": "ranks",
    "tests/lessons/model_parallel/test_ranks.py": "ranks",
    "tests/lessons/test_checkpoint_order.py": "ranks",
    "tests/lessons/test_conversion_lab.py": "ranks",
    "tests/lessons/test_faults.py": "ranks",
    "tests/lessons/test_framework_compare.py::test_the_keras_trainer": "ranks",
    "tests/lessons/test_gradients.py": "ranks",
    "tests/lessons/test_parameter_server.py": "ranks",
    "tests/lessons/test_ring.py": "ranks",
    "tests/lessons/test_timeline.py": "ranks",
    "tests/project/test_ansible_lab.py": "service",
    "tests/project/test_container.py::test_the_image_builds": "container",
    "tests/project/test_container.py::test_make_check_passes": "container",
    "tests/project/test_container.py::test_lesson_03": "container",
    "tests/project/test_container.py::test_the_images_command": "container",
    "tests/project/test_container.py::test_no_container": "container",
    "tests/runtime/test_engines.py": "ranks",
    "tests/runtime/test_errors.py::test_sigterm": "ranks",
    "tests/runtime/test_errors.py::test_grader": "service",
    "tests/runtime/test_launch.py": "ranks",
    "tests/runtime/test_rank_results.py": "ranks",
    "tests/services/test_lab_browser.py": "browser service",
    "tests/services/test_monitoring.py": "service ranks",
    "tests/services/test_slurm_cluster.py": "slurm",
    "tests/services/test_ssh_server.py": "service",
    "tests/slurm/test_slurm_jobs.py": "slurm",
    "tests/slurm/test_slurm_scripts.py": "slurm",
}


def needs_of(item) -> set:
    found = {
        NEEDS_BY_FIXTURE[f] for f in getattr(item, "fixturenames", ()) if f in NEEDS_BY_FIXTURE
    }
    path, _, name = item.nodeid.partition("::")
    for key, marks in NEEDS.items():
        where, _, prefix = key.partition("::")
        if where == path and name.startswith(prefix):
            found.update(marks.split())
    return found


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups and -m selects
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        for mark in sorted(needs_of(item)):
            item.add_marker(mark)
    if not is_worker(config):
        return
    group_of = {path: name for name, paths in XDIST_GROUPS.items() for path in paths}
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark:
            groups[item] = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
            continue
        module = item.nodeid.split("::")[0]
        book = "built_book" in getattr(item, "fixturenames", ())
        groups[item] = "book" if book else group_of.get(module, module)
        item.add_marker(pytest.mark.xdist_group(groups[item]))

    def rank(item):
        group = groups[item]
        return (
            STARTS_FIRST.index(group)
            if group in STARTS_FIRST
            else len(STARTS_FIRST) + (group == "book")
        )

    items.sort(key=rank)  # stable: a group's tests keep their order


def wait_for_workers_build(timeout: float) -> int:
    """The exit code of the controller's build (its status file), waiting up to ``timeout`` s."""
    build_id = os.environ.get(BUILD_ID, "")
    assert build_id, "no book build was started by the session's controller"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(BUILD_STATUS) as fh:
                found, code = fh.read().split()
            if found == build_id:
                return int(code)
        except (OSError, ValueError):
            pass
        time.sleep(2)
    raise AssertionError(f"the book build did not end within {timeout:.0f} s (log: {BUILD_LOG})")


@pytest.fixture(scope="session")
def built_book(request):
    """The HTML book, built by the same command as ``make book`` (started by the session, above).

    The build executes only what changed since the last one (myst-nb's cache; see
    ``hvdcourse.course.book.book_build``): after ``make book`` it executes no lesson and takes seconds; after a
    change to a lesson, the package or its data it executes what that change affects.
    """
    if is_worker(request.config):
        returncode = wait_for_workers_build(BUILD_TIMEOUT + 60)
    else:
        start_book_build()  # (a test that asked for the book when the collection did not see it)
        left = BUILD_TIMEOUT + 60 - (time.monotonic() - _book_build["started"])
        if not _book_build["ended"].wait(timeout=max(left, 1)):
            stop_book_build()
        returncode = _book_build["proc"].returncode
    with open(BUILD_LOG) as fh:
        log = fh.read()
    assert returncode == 0, f"book build failed or hung (log: {BUILD_LOG}):\n" + log[-6000:]
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
    download for the session (tests/project/test_stack.py, tests/check/test_gpu_route.py)."""
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
        # the "data" filter where tarfile has it (Python 3.11.4+; Debian 12's 3.11.2 lacks it)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(folder, **safe)
    return folder / "horovod-0.28.1"


# --- One local Slurm cluster per session (hvdcourse.course.services.slurm_cluster), for every module that submits ---
@pytest.fixture(scope="session")
def local_cluster():
    """The local 2-node Slurm cluster, started once for the session and always stopped at its end.
    (pytest-xdist: the modules that use it share one worker, see XDIST_GROUPS.)"""
    import tempfile

    from hvdcourse.course.services.slurm_cluster import LocalCluster

    cluster = LocalCluster(tempfile.mkdtemp(prefix="hvdcourse-slurm-", dir="/tmp"))
    try:
        cluster.start(timeout=60)
        yield cluster
    finally:
        for job in cluster.completed_jobs():  # the record of this session's jobs (pytest -s or -rA)
            print(
                f"slurm job {job.get('JobId')} {job.get('Name')}: {job.get('JobState')} in "
                f"{job.get('Seconds')} s on {job.get('NodeList')} ({job.get('ProcCnt')} CPUs), "
                f"exit {job.get('ExitCode')}"
            )
        cluster.stop(quiet=True, remove=True)


# --- Horovod's build report, read once for the session (tests/project/test_stack.py, tests/check/test_envcheck.py) ---
@pytest.fixture(scope="session")
def check_build_report():
    """What ``horovodrun --check-build`` of this venv prints."""
    run = subprocess.run(
        [os.path.join(os.path.dirname(PYTHON), "horovodrun"), "--check-build"],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: it imports TensorFlow and PyTorch (minutes at load 20)
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run.stdout


# --- The class hub's installation (tools/setup_hub.sh), made once per session ---
@pytest.fixture(scope="session")
def hub_install():
    """tools/setup_hub.sh run once for the session (tests/hub, the non-root grader): the hub's venv,
    its proxy and a course venv the learners' accounts can run (the first time: minutes; then a
    no-op of seconds)."""
    install = subprocess.run(
        ["bash", os.path.join(ROOT, "tools", "setup_hub.sh")],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]


# --- One class hub for tests/hub/test_class_hub.py and tests/hub/test_hub.py (one xdist group) ---
HUB_MEMORY, HUB_CPUS, HUB_PROCS = "2G", 1.0, 256  # 2G: a learner's check runs 2 TensorFlow ranks


@pytest.fixture(scope="session")
def hub(hub_install):
    """A real JupyterHub with its real proxy and TLS on a free port of 127.0.0.1, for 3 new learner
    accounts from a roster (homes in a temporary folder). test_class_hub.py (the learners in a
    browser, the class round) and test_hub.py (servers, limits, isolation) share it: starting it and
    the learners' servers is the expensive part. test_hub.py's last test stops it; at the end of the
    session it is stopped again (a no-op), the accounts and homes are removed and the answer keys'
    modes in this clone put back."""
    import csv
    import pwd
    import shutil
    import socket
    import tempfile

    from hvdcourse.course.hub import private, setup
    from hvdcourse.course.hub.api import Hub

    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.fail("the class hub's tests need root and useradd (they make learners' accounts)")
    base = tempfile.mkdtemp(prefix="hvdhub-")
    os.chmod(base, 0o755)  # learners must reach their homes
    homes, state = os.path.join(base, "homes"), os.path.join(base, "state")
    os.makedirs(homes, mode=0o755)
    tag = os.urandom(2).hex()
    names = [f"hvdhub{tag}{letter}" for letter in "abc"]
    roster = os.path.join(base, "roster.csv")
    with open(roster, "w") as fh:
        fh.write("username,email\n" + "".join(f"{n},{n}@example.org\n" for n in names))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # hub start closes the answer keys in this clone: their modes are put back afterwards
    kernel_package = private.kernel_package(setup.Install().kernel_python())
    saved = private.modes(private.places(ROOT, (kernel_package,)))
    start_argv = ["start", "--roster", roster, "--state", state, "--homes", homes]
    start_argv += ["--port", str(port), "--memory", HUB_MEMORY, "--cpus", str(HUB_CPUS)]
    start_argv += ["--procs", str(HUB_PROCS), "--idle-timeout", "600"]
    try:
        began = time.monotonic()
        proc = course_cli("hvdcourse.course.hub", *start_argv, timeout=180)
        started = time.monotonic() - began
        assert proc.returncode == 0, proc.stdout + proc.stderr
        settings = setup.State(state).read_settings()
        with open(os.path.join(state, "passwords.csv")) as fh:
            passwords = {row["username"]: row["first_password"] for row in csv.DictReader(fh)}
        yield {
            "base": base,
            "names": names,
            "homes": homes,
            "state": state,
            "roster": roster,
            "start_argv": start_argv,
            "stdout": proc.stdout,
            "settings": settings,
            "passwords": passwords,
            "api": Hub.of(settings),
            "hub_start_s": started,
        }
    finally:
        course_cli("hvdcourse.course.hub", "stop", "--state", state, timeout=180)
        for name in names:
            try:
                pwd.getpwnam(name)
            except KeyError:
                continue
            subprocess.run(["userdel", "-r", name], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)
        private.restore(saved)


def course_cli(module: str, *argv, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGV`` in the clone (the hub's and the class's commands in tests/hub)."""
    return subprocess.run(
        [PYTHON, "-m", module, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.fixture(autouse=True)
def _hub_tests_need_root_and_useradd(request):
    """The class hub's tests make learners' Unix accounts: without root and useradd they fail, saying so."""
    if os.sep + os.path.join("tests", "hub") + os.sep in str(request.node.fspath):
        if os.geteuid() != 0 or not shutil.which("useradd"):
            pytest.fail(
                "the hub's tests make learners' Unix accounts: run them as root, with useradd"
            )
