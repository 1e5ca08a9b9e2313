"""Where the test session's CPU goes: per test, per area (the markers), the book build, the machine.

Loaded by tests/conftest.py. Every test's CPU seconds (setup, call and teardown: the pytest process's
own plus every child it started and reaped, the MPI ranks under a launcher included) go to one line
of ``_build/test-cpu.jsonl`` with its area, the first of its markers in :data:`AREAS` (``unit`` when
it has none), and the commands it started. The book build (started in the background by the session)
is counted apart, when it is reaped. Daemons that detach (Ray's raylet, Slurm's daemons started by
``sbatch`` jobs) are not children of the session: the machine's busy CPU seconds over the session
(``/proc/stat``) are printed beside the accounted total, so that the gap is visible.

At the end of the session the terminal summary prints CPU seconds per area, the book build's and the
machine's; ``.ci/run`` prints the same (``python tests/cpu_account.py _build/test-cpu.jsonl``).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

# the areas, the heavier first: a test with several markers counts in the first (``make test-fast``
# runs the tests with none of them)
AREAS = ("book", "hub", "container", "slurm", "browser", "service", "ranks")
DESCRIPTIONS = {
    "book": "reads the built book (the session builds it once, in the background)",
    "hub": "starts the class hub or installs it (root, Unix accounts)",
    "container": "builds or runs the course's container image (Podman, root)",
    "slurm": "submits to a local Slurm cluster",
    "browser": "drives headless Chromium",
    "service": "starts a service: Ray, Prometheus, JupyterLab, a kernel, an SSH server, a grader's sandbox",
    "ranks": "starts a multi-rank job (MPI or Gloo ranks, ipyparallel engines) or a training run",
}
# commands that show what a test needs, whatever its markers say: an unmarked test that starts one
# is listed at the end of the session (its module's line in tests/conftest.py's NEEDS is missing)
TELLING_COMMANDS = {
    "mpirun -np": "ranks",
    "horovodrun -np": "ranks",
    "torchrun": "ranks",
    "sbatch": "slurm",
    "srun": "slurm",
    "jupyter-book build": "book",
    "podman": "container",
    "chromium": "browser",
    "python -m hvdcourse.course.grading.grader": "service",
    "mpiexec": "ranks",
    "slurmctld": "slurm",
    "slurmd": "slurm",
    "python -m ipykernel_launcher": "service",
    "jupyter-lab": "service",
    "prometheus": "service",
    "sshd": "service",
    "ray start": "service",
    "gcs_server": "service",
    "raylet": "service",
}
LOG = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_build", "test-cpu.jsonl"
)
_book = {"cpu": 0.0}  # CPU seconds of the book build, once reaped (conftest's build thread adds it)
_commands: list = []  # the commands the current test started


def busy_seconds() -> float:
    """The machine's busy CPU seconds since boot, all cores (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> float:
    """This process's CPU seconds plus those of every child it has reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def book_build_reaped(rusage) -> None:
    """Called by the book build's waiting thread with the build's ``os.wait4`` usage."""
    _book["cpu"] += rusage.ru_utime + rusage.ru_stime
    write({"kind": "book-build", "cpu": round(rusage.ru_utime + rusage.ru_stime, 2)})


def area_of(item) -> str:
    names = {mark.name for mark in item.iter_markers()}
    return next((area for area in AREAS if area in names), "unit")


def write(record: dict) -> None:
    with open(LOG, "a") as fh:
        fh.write(json.dumps(record) + "\n")


_original_init = subprocess.Popen.__init__


def _recording_init(self, args, *a, **k):
    words = [args] if isinstance(args, (str, bytes)) else list(args)
    _commands.append(" ".join(os.path.basename(str(w)) for w in words[:3])[:80])
    _original_init(self, args, *a, **k)


# set by the session that keeps the account: a pytest started by a test (tests/lessons/test_faults.py
# runs one) sees it and keeps out, so that it neither empties the file nor counts twice
OWNER = "HVDCOURSE_CPU_ACCOUNT"


class CpuAccount:
    def __init__(self, config):
        self.config = config
        self.worker = hasattr(config, "workerinput")

    @staticmethod
    def register(config) -> None:
        """Keep the account in this session unless an outer session keeps it (xdist workers join theirs)."""
        worker = hasattr(config, "workerinput")
        if os.environ.get(OWNER) and not worker:
            return
        os.environ[OWNER] = str(os.getpid())
        config.pluginmanager.register(CpuAccount(config), "hvdcourse-cpu-account")

    def pytest_sessionstart(self, session):
        if self.config.option.collectonly:
            return
        if not self.worker:
            os.makedirs(os.path.dirname(LOG), exist_ok=True)
            open(LOG, "w").close()
            self.started = (time.monotonic(), busy_seconds())
        subprocess.Popen.__init__ = _recording_init

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        _commands.clear()
        before, book_before, began = cpu_seconds(), _book["cpu"], time.monotonic()
        yield
        used = cpu_seconds() - before - (_book["cpu"] - book_before)
        write(
            {
                "kind": "test",
                "test": item.nodeid,
                "area": area_of(item),
                "cpu": round(used, 2),
                "wall": round(time.monotonic() - began, 2),
                "commands": sorted(set(_commands))[:12],
            }
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        subprocess.Popen.__init__ = _original_init
        if self.worker or not hasattr(self, "started"):
            return
        wall = time.monotonic() - self.started[0]
        write(
            {
                "kind": "machine",
                "busy": round(busy_seconds() - self.started[1], 1),
                "wall": round(wall, 1),
            }
        )

    def pytest_terminal_summary(self, terminalreporter):
        if not self.worker and not self.config.option.collectonly and os.path.exists(LOG):
            for line in summary(LOG):
                terminalreporter.write_line(line)


def telling(record: dict) -> str:
    """The area that the commands a test started show it needs ('' if none does)."""
    for command in record.get("commands", ()):
        for start, area in TELLING_COMMANDS.items():
            if command.startswith(start):
                return area
    return ""


def summary(path: str) -> list:
    """The CPU account of a session's ``test-cpu.jsonl``, as lines to print."""
    areas: dict = {}
    untold: list = []
    book = machine = None
    with open(path) as fh:
        for line in fh:
            record = json.loads(line)
            if record["kind"] == "test":
                cpu, count, wall = areas.get(record["area"], (0.0, 0, 0.0))
                areas[record["area"]] = (cpu + record["cpu"], count + 1, wall + record["wall"])
                if record["area"] == "unit" and telling(record):
                    untold.append(record)
            elif record["kind"] == "book-build":
                book = record["cpu"]
            elif record["kind"] == "machine":
                machine = record
    tests = sum(cpu for cpu, _, _ in areas.values())
    unmarked = sorted({(r["test"].split("::")[0], need) for r in untold for need in [telling(r)]})
    lines = ["cpu: CPU seconds of the test session (the tests' own processes and their children):"]
    for area in (*AREAS, "unit"):
        if area in areas:
            cpu, count, wall = areas[area]
            lines.append(
                f"cpu: {area:>9} {cpu:8.0f} CPU s  {count:5d} tests  {wall:7.0f} s of test time"
            )
    lines.append(f"cpu: {'tests':>9} {tests:8.0f} CPU s")
    if book is not None:
        lines.append(f"cpu: {'book':>9} {book:8.0f} CPU s  (the book build, beside the tests)")
        lines.append(f"cpu: {'session':>9} {tests + book:8.0f} CPU s  (tests and book build)")
    for module, need in unmarked:
        lines.append(
            f"cpu: unmarked tests of {module} start what needs '{need}' (tests/conftest.py, NEEDS)"
        )
    if machine:
        lines.append(
            f"cpu: {'machine':>9} {machine['busy']:8.0f} CPU s busy in {machine['wall']:.0f} s "
            f"(all processes: detached daemons such as Ray's and Slurm's included)"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(summary(sys.argv[1] if len(sys.argv) > 1 else LOG)))
