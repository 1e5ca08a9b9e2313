"""Find and kill every process a submission started (lesson: Instructor guide).

The grader gives each submission's runner a unique token in its environment; the kernel, ``mpirun``
and the ranks inherit it, even after their parents die and they are re-parented. Killing by token
therefore reaches processes that a process-group kill misses (jupyter_client and the launcher both
start new sessions). A submission's processes get no grace period: they are killed at once.
"""

from __future__ import annotations

import os

from hvdcourse.runtime import processes

TOKEN = "HVDCOURSE_SUBMISSION_TOKEN"


def tagged(token: str, spare: int | None = None) -> list:
    """PIDs of the processes whose environment holds ``HVDCOURSE_SUBMISSION_TOKEN=<token>``."""
    return [
        p.pid for p in processes.with_env(TOKEN, token, exclude=() if spare is None else (spare,))
    ]


def kill_tagged(token: str, spare: int | None = None) -> int:
    """SIGKILL every process carrying ``token`` (except ``spare``); return how many were found."""
    exclude = () if spare is None else (spare,)
    return processes.end_all(lambda: processes.with_env(TOKEN, token, exclude=exclude), rounds=1)


def owned_by(uid: int) -> list:
    """PIDs of the processes whose real user is ``uid`` (a sandbox user: nothing else runs as it)."""
    return [p.pid for p in processes.owned_by(uid)]


def kill_user(uid: int | None, rounds: int = 5) -> int:
    """SIGKILL every process of the sandbox user ``uid`` (a process cannot leave its user); how many."""
    if uid is None or uid == 0 or uid == os.getuid():
        return 0
    return processes.end_all(lambda: processes.owned_by(uid), rounds=rounds)
