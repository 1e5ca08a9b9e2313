"""Per-learner limits on memory, CPU and processes for the class hub (lesson: Instructor guide).

Each learner's single-user server (and every kernel and MPI rank it starts) runs in a control group of
its own, ``hvdcourse-hub/<username>``, made by the hub as root before the server starts:

- cgroups v2 (one unified hierarchy with the memory, cpu and pids controllers): ``memory.max``,
  ``cpu.max`` and ``pids.max``;
- cgroups v1 (one hierarchy per controller, as on this course's machines): ``memory.limit_in_bytes``,
  ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and ``pids.max``;
- neither writable (a container without its own cgroups): only the process limit holds, as the
  ``RLIMIT_NPROC`` resource limit of the learner's account; memory and CPU are then not limited, and
  :func:`describe` says so.

``RLIMIT_NPROC`` is set in every case. Nothing here imports JupyterHub: the module runs in the hub's
Python and is tested in the course's.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from dataclasses import dataclass

CGROUP_ROOT = "/sys/fs/cgroup"
PARENT = "hvdcourse-hub"
CPU_PERIOD = 100_000  # microseconds: the CFS period, with a quota of cpus x period
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass
class Limits:
    memory: int  # bytes
    cpus: float  # cores
    procs: int  # processes and threads (tasks)


def parse_bytes(text: str) -> int:
    """``'2G'`` -> 2147483648 (K, M, G, T are powers of 1024); ValueError with the reason otherwise."""
    value = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in UNITS and value[-1:] else ""
    number = value[: -len(unit)] if unit else value
    try:
        size = float(number) * UNITS[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not a size: write e.g. 2G or 512M") from None
    if size < 64 * 2**20:
        raise ValueError(f"{text!r} is below 64M, too little for a Jupyter server")
    return int(size)


def mode(root: str = CGROUP_ROOT) -> str:
    """``'v2'``, ``'v1'`` or ``'none'``: which cgroups this machine lets root limit learners with,
    found by making the hub's parent group(s) (a container's cgroups may be read-only, or refuse
    to hand the controllers down)."""
    controllers = os.path.join(root, "cgroup.controllers")
    if os.path.isfile(controllers):
        with open(controllers) as fh:
            found = set(fh.read().split())
        if {"memory", "cpu", "pids"} <= found:
            try:
                os.makedirs(os.path.join(root, PARENT), exist_ok=True)
                for folder in (root, os.path.join(root, PARENT)):
                    _write(folder, "cgroup.subtree_control", "+memory +cpu +pids")
                if os.path.isfile(os.path.join(root, PARENT, "cgroup.procs")):
                    return "v2"
            except OSError:
                pass
    made = []
    try:
        for controller in ("memory", "cpu", "pids"):
            folder = os.path.join(root, controller, PARENT)
            if not os.path.isdir(folder):
                os.mkdir(folder)
                made.append(folder)
            if not os.path.isfile(os.path.join(folder, "cgroup.procs")):  # not a cgroup file system
                raise OSError(f"{folder} is not a cgroup")
        return "v1"
    except OSError:
        for folder in made:
            os.rmdir(folder)
        return "none"


def describe(limits: Limits, how: str) -> str:
    """One line for the instructor: the limits and how they are enforced."""
    what = f"memory {limits.memory / 2**30:.1f} GiB, {limits.cpus:g} CPU, {limits.procs} tasks"
    if how == "none":
        return (
            f"limits per learner: {limits.procs} processes (RLIMIT_NPROC) only; memory and CPU are "
            "NOT limited (no writable cgroups on this machine)"
        )
    return f"limits per learner: {what} (cgroups {how}, group {PARENT}/<username>)"


def groups(user: str, how: str, root: str = CGROUP_ROOT) -> list:
    """The cgroup folders of ``user``: one (v2) or one per controller (v1); none without cgroups."""
    if how == "v2":
        return [os.path.join(root, PARENT, user)]
    if how == "v1":
        return [os.path.join(root, c, PARENT, user) for c in ("memory", "cpu", "pids")]
    return []


def _write(folder: str, name: str, value) -> None:
    with open(os.path.join(folder, name), "w") as fh:
        fh.write(f"{value}\n")


def prepare(user: str, limits: Limits, how: str, root: str = CGROUP_ROOT) -> list:
    """Create ``user``'s cgroup(s) with ``limits`` (as root, in the hub); returns their folders."""
    folders = groups(user, how, root)
    quota = max(int(limits.cpus * CPU_PERIOD), 1000)
    if how == "v2":
        parent = os.path.join(root, PARENT)
        os.makedirs(folders[0], exist_ok=True)
        for folder in (root, parent):  # the controllers must be handed down to the children
            _write(folder, "cgroup.subtree_control", "+memory +cpu +pids")
        _write(folders[0], "memory.max", limits.memory)
        _write(folders[0], "cpu.max", f"{quota} {CPU_PERIOD}")
        _write(folders[0], "pids.max", limits.procs)
    elif how == "v1":
        memory, cpu, pids = folders
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
        _write(memory, "memory.limit_in_bytes", limits.memory)
        _write(cpu, "cpu.cfs_period_us", CPU_PERIOD)
        _write(cpu, "cpu.cfs_quota_us", quota)
        _write(pids, "pids.max", limits.procs)
    return folders


def enter(folders: list, limits: Limits) -> None:
    """Put the calling process into ``folders`` and set its process limit; called in the server's
    child process as root, just before it becomes the learner (its children inherit both)."""
    for folder in folders:
        _write(folder, "cgroup.procs", os.getpid())
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.procs, limits.procs))


def members(folders: list) -> set:
    """The pids in ``folders`` (empty when they are gone)."""
    found = set()
    for folder in folders:
        try:
            with open(os.path.join(folder, "cgroup.procs")) as fh:
                found.update(int(line) for line in fh if line.strip())
        except OSError:
            continue
    return found


def release(folders: list, grace: float = 5.0) -> int:
    """End what still runs in ``folders`` (SIGTERM, then SIGKILL after ``grace`` s) and remove them;
    returns how many processes were left to end (0 when the server had stopped cleanly)."""
    left = members(folders)
    deadline = time.monotonic() + grace
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in members(folders):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        while members(folders) and time.monotonic() < deadline:
            time.sleep(0.1)
        deadline = time.monotonic() + 5
    for folder in folders:
        for _ in range(50):  # a killed process leaves its group a moment after it exits
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
    return len(left)


def remove_parents(how: str, root: str = CGROUP_ROOT) -> None:
    """Remove the hub's parent group(s), if no learner's group is left in them."""
    parents = [os.path.dirname(f) for f in groups("x", how, root)]
    for folder in parents:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def usage(folders: list) -> int | None:
    """Bytes of memory the group uses now (cgroups' own count), or None without cgroups."""
    for folder in folders:
        for name in ("memory.current", "memory.usage_in_bytes"):
            try:
                with open(os.path.join(folder, name)) as fh:
                    return int(fh.read())
            except OSError:
                continue
    return None
