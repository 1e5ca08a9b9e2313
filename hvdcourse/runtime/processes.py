"""Finding and ending processes: one way for the whole course, with ``psutil``.

Whatever starts processes (a launcher and its ranks, MPI engines, the grader's sandboxes, the local
Slurm cluster, a test session) finds them again by something they cannot shed: a marker in their
environment (inherited by every descendant, even once re-parented), their user, or their process
group; and ends them the same way: SIGTERM, a grace period, SIGKILL for what is left.
"""

from __future__ import annotations

import os
import signal
import time

import psutil


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def with_env(name: str, value: str, exclude=()) -> list:
    """Live processes whose environment holds ``name=value`` (never this one or ``exclude``)."""
    if not value:
        return []
    skip = {os.getpid(), *exclude}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip:
            continue
        try:
            if proc.environ().get(name) == value and _alive(proc):
                found.append(proc)
        except (psutil.Error, OSError):  # gone meanwhile, or not ours to read
            continue
    return found


def owned_by(uid: int) -> list:
    """Live processes whose real user is ``uid``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.uids().real == uid and _alive(proc):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def by_pid(pids) -> list:
    """The live processes among ``pids``."""
    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            continue
        if _alive(proc):
            found.append(proc)
    return found


def describe(procs) -> list:
    """``[(pid, command line)]`` of ``procs``, for messages."""
    out = []
    for proc in procs:
        try:
            out.append((proc.pid, " ".join(proc.cmdline())[:200]))
        except psutil.Error:
            out.append((proc.pid, "?"))
    return out


def end(procs, grace: float = 5.0, groups=()) -> list:
    """SIGTERM ``procs`` and the process ``groups``, wait up to ``grace`` s, SIGKILL what is left.

    ``grace=0`` kills at once (a sandbox's processes get no chance to react). Returns the processes
    still alive afterwards (normally none)."""
    procs = [p for p in procs if _alive(p)]
    for sig in (signal.SIGKILL,) if grace <= 0 else (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        # a zombie counts as gone (its parent reaps it); psutil.wait_procs would wait for that
        procs = wait_gone(procs, grace if sig == signal.SIGTERM else 5)
        if not procs:
            return []
    return procs


def end_all(find, grace: float = 0.0, rounds: int = 5) -> int:
    """End what ``find()`` returns until it returns nothing (a forking process may start a child
    between a scan and a kill); how many processes were ended."""
    total = 0
    for _ in range(rounds):
        procs = find()
        if not procs:
            break
        total += len(procs)
        end(procs, grace)
    return total


def wait_gone(procs, timeout: float) -> list:
    """Wait up to ``timeout`` s for ``procs`` to exit; the ones still alive."""
    deadline = time.monotonic() + timeout
    procs = [p for p in procs if _alive(p)]
    while procs and time.monotonic() < deadline:
        time.sleep(0.1)
        procs = [p for p in procs if _alive(p)]
    return procs
