"""What a benchmark ran on, and the machine's memory-copy bandwidth (lesson: Measuring performance).

A number without its machine is not a result: every JSON file of :mod:`hvdcourse.course.bench.suite`
starts with :func:`describe_machine`. :func:`memcopy_bandwidth` measures the limit of any
allreduce on one machine: ranks on one host exchange data through memory, so no allreduce can move
bytes faster than one core copies them.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import statistics
import subprocess
import time
from importlib import metadata


def _first_line(cmd: list) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def os_name() -> str:
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    return (
                        line.split("=", 1)[1].strip().strip('"') + f" (kernel {platform.release()})"
                    )
    except OSError:
        pass
    return platform.platform()


def memory_gib() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 2**30, 1)


def load_average() -> list:
    """1, 5 and 15-minute load averages: above the core count, other work competed with the benchmark."""
    return [round(x, 2) for x in os.getloadavg()]


def describe_machine() -> dict:
    """CPU, cores, memory, OS, software versions, date and load: the header of every result file."""
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "hypervisor": _hypervisor(),
        "memory_gib": memory_gib(),
        "os": os_name(),
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        # tf.keras is tf-keras (Keras 2) in the course
        "keras": _version("tf-keras") or _version("keras"),
        "torch": _version("torch"),
        "horovod": _version("horovod"),
        "mpi": _first_line(["mpirun", "--version"]),
        "mpi4py": _version("mpi4py"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "load_average_1_5_15min": load_average(),
    }


def _hypervisor() -> str | None:
    line = None
    out = _first_line(["sh", "-c", "lscpu | grep -i 'hypervisor vendor'"])
    if out:
        line = out.split(":", 1)[1].strip()
    return line


PRIORITY_VARIABLE = "HVDCOURSE_BENCH_NICE"


def raise_priority(nice: int | None = None) -> dict:
    """Run this process (and its threads) at niceness ``nice`` (default: $HVDCOURSE_BENCH_NICE), if any.

    On Linux with ``sched_autogroup`` (the default on desktops and many VMs), CPU time is first shared
    fairly between *sessions*, and a plain ``nice`` only counts inside one session: the session's
    autogroup must be reniced too (``/proc/self/autogroup``). Needs root for negative values. Returns
    what was applied, for the record.
    """
    if nice is None:
        text = os.environ.get(PRIORITY_VARIABLE, "")
        if not text:
            return {}
        nice = int(text)
    applied = {}
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        applied["nice"] = nice
    except OSError as err:
        applied["nice_error"] = err.strerror
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(nice))
        applied["autogroup_nice"] = nice
    except OSError as err:
        applied["autogroup_error"] = err.strerror
    return applied


def memcopy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 7) -> dict:
    """Median bytes/s of ``numpy.copyto`` between two ``nbytes`` buffers (each byte read once, written once).

    The buffers are written once first so that page faults are not timed.
    """
    import numpy as np

    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch every page of dst before timing
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {
        "bytes": int(src.nbytes),
        "repeats": repeats,
        "median_seconds": seconds,
        "bytes_per_second": src.nbytes / seconds,
    }
