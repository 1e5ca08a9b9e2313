"""What the grader sets up inside the student's kernel: only an output cap (lesson: Instructor guide).

Nothing that decides points runs in the student's kernel: see :mod:`hvdcourse.course.grading.judge`.
"""

from __future__ import annotations

import sys


class OutputLimitExceeded(Exception):
    """A cell printed more than the grader accepts."""


def cap_output(limit: int) -> None:
    """Make print() in one cell fail past ``limit`` characters (an IPython startup file calls this).

    It stops a runaway loop where it prints, before megabytes reach the grader; the grader's own
    count of the kernel's messages stays the authority.
    """
    from IPython import get_ipython

    class Capped:
        def __init__(self, stream):
            self._stream, self.count = stream, 0

        def write(self, text):
            self.count += len(text)
            if self.count > limit:
                self.write = self._stream.write  # let the error itself be shown
                raise OutputLimitExceeded(
                    f"[grader] this cell printed more than {limit // 1000} kB"
                )
            return self._stream.write(text)

        def __getattr__(self, name):
            return getattr(self._stream, name)

    streams = [Capped(sys.stdout), Capped(sys.stderr)]
    sys.stdout, sys.stderr = streams

    def reset(*_):
        for stream in streams:
            stream.count = 0
            stream.__dict__.pop("write", None)

    get_ipython().events.register("pre_run_cell", reset)
