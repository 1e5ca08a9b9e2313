"""What the grader's two ways of running a class share (lesson: Instructor guide).

:mod:`hvdcourse.course.grading.grader` grades on this machine, :mod:`hvdcourse.course.grading.slurm`
as a Slurm job array; both budget each notebook with the same grace period and print the same
progress line. The names live here so that neither module imports the other for them.
"""

from __future__ import annotations

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
