"""Find and kill every process a submission started (lesson: Instructor guide).

The grader gives each submission's runner a unique token in its environment; the kernel, ``mpirun``
and the ranks inherit it, even after their parents die and they are re-parented. Killing by token
therefore reaches processes that a process-group kill misses (jupyter_client and the launcher both
start new sessions).
"""
from __future__ import annotations

import os
import signal


def tagged(token: str, spare: int | None = None) -> list:
    """PIDs of the processes whose environment holds ``HVDCOURSE_SUBMISSION_TOKEN=<token>``."""
    if not token:
        return []
    needle = f"HVDCOURSE_SUBMISSION_TOKEN={token}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == spare:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def kill_tagged(token: str, spare: int | None = None) -> int:
    """SIGKILL every process carrying ``token`` (except ``spare``); return how many were found."""
    pids = tagged(token, spare)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


def owned_by(uid: int) -> list:
    """PIDs of the processes whose real user is ``uid`` (a sandbox user: nothing else runs as it)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(name))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_user(uid: int | None, rounds: int = 5) -> int:
    """SIGKILL every process of the sandbox user ``uid`` (a process cannot leave its user); how many."""
    import time

    if uid is None or uid == 0 or uid == os.getuid():
        return 0
    total = 0
    for _ in range(rounds):  # a forking process may start a child between the scan and the kill
        pids = owned_by(uid)
        if not pids:
            break
        total += len(pids)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    return total
