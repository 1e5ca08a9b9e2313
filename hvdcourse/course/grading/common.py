"""What the grader's two ways of running a class share (lesson: Instructor guide).

:mod:`hvdcourse.course.grading.grader` grades on this machine, :mod:`hvdcourse.course.grading.slurm`
as a Slurm job array; both budget each notebook with the same grace period and print the same
progress line. The names live here so that neither module imports the other for them.
"""

from __future__ import annotations

import time

# seconds the runner gets beyond the notebook's limits to shut the kernel down and report
GRACE = 60


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(done: int, total: int, elapsed: float, width: int = 20) -> str:
    """``[########------------] 8/20, 1m10s elapsed, about 1m45s left`` (the estimate from the mean so far)."""
    filled = int(width * done / total) if total else width
    left = elapsed / done * (total - done) if done else 0
    return (
        f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}, {_duration(elapsed)} elapsed"
        + (f", about {_duration(left)} left" if done < total else "")
    )


class Stages:
    """Wall seconds of a notebook's grading, stage by stage (the report's ``timing``): each stage runs
    from the end of the one before. Wall-clock stamps (``time.time()``), so that a stage may start in
    one process and end in another (the grader starts the runner, the runner the answer run)."""

    def __init__(self, start: float | None = None):
        self.last = time.time() if start is None else start
        self.seconds = {}

    def lap(self, stage: str, now: float | None = None) -> None:
        """End ``stage`` now (or at the stamp ``now``); a stage ended twice adds up."""
        now = time.time() if now is None else now
        self.seconds[stage] = round(self.seconds.get(stage, 0.0) + max(0.0, now - self.last), 3)
        self.last = max(self.last, now)
