"""What travels between the grader's processes: the job, the report and its status, the stage times
(lesson: Instructor guide).

The grader hands the runner a :class:`Job` (a JSON file); the runner hands back a :class:`Report`
(a JSON file), whose :class:`Status` says what happened to the notebook in a few words of feedback;
:class:`Stages` times each stage of a notebook's grading across those processes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from typing import TypedDict


class Status(enum.StrEnum):
    """What happened to a notebook, and the few words of feedback that say so."""

    OK = "ok"
    UNREADABLE = "unreadable"
    TIMEOUT = "timeout"
    KERNEL_DIED = "kernel-died"
    OUTPUT_CAP = "output-cap"
    GRADING_FAILED = "grading-failed"
    VIOLATION = "violation"
    MEMORY_LIMIT = "memory-limit"
    PROCESS_LIMIT = "process-limit"
    CPU_LIMIT = "cpu-limit"
    NOT_RUN = "not-run"
    GRADER_ERROR = "grader-error"

    @property
    def feedback(self) -> str:
        """``<notebook> ...``: what happened, as the feedback and the class summary say it."""
        return _FEEDBACK[self]

    @classmethod
    def feedback_of(cls, status: str, otherwise: str = "gave no result") -> str:
        """The feedback of the status named ``status`` (a report's), or ``otherwise``."""
        try:
            return cls(status).feedback
        except ValueError:
            return otherwise


_FEEDBACK = {
    Status.OK: "was graded",
    Status.UNREADABLE: "could not be read as a notebook",
    Status.TIMEOUT: "ran past the time limit and was stopped",
    Status.KERNEL_DIED: "stopped its Python kernel",
    Status.OUTPUT_CAP: "printed too much output",
    Status.GRADING_FAILED: "broke the grading cell",
    Status.VIOLATION: "tried to read the solutions",
    Status.MEMORY_LIMIT: "hit the memory limit",
    Status.PROCESS_LIMIT: "hit the limit on processes",
    Status.CPU_LIMIT: "hit the CPU time limit",
    Status.NOT_RUN: "could not be run",
    Status.GRADER_ERROR: "could not be graded (grader error)",
}


class Report(TypedDict, total=False):
    """One notebook's report, as the runner writes it and the grader completes it (JSON)."""

    status: str  # a Status
    problem: str  # what went wrong, in a sentence ('' if nothing did)
    errors: list  # [{"cell", "ename", "evalue"}]: the cells that raised
    results: list  # the judge's results (CheckResult.to_dict), one per exercise
    violations: list  # [{"kind", "path", "event"}]: what the sandbox denied
    hidden: list  # the folders hidden from the notebook
    cells: int
    output_bytes: int
    notes: list  # what the grader changed to run it (format, kernel)
    exercises: list  # the exercise ids graded
    static: dict  # {answer name: facts read from the notebook's text}
    left_out: list
    unparsable: list
    answers: dict  # the answer run's data (judged, then dropped)
    answer_problem: str
    check_seconds: float
    cpu: dict  # CPU seconds of the notebook run, the answer run and the judge
    seconds: float  # wall seconds of the whole notebook
    timing: dict  # wall seconds per stage (Stages)


def failed(status: Status, problem: str, **more) -> Report:
    """The report of a notebook that gave no results: ``status`` and why."""
    return Report(status=status, problem=problem, errors=[], results=[], violations=[], **more)


@dataclasses.dataclass(frozen=True)
class Job:
    """What the grader asks of the runner for one notebook (written as ``job.json``)."""

    notebook: str  # the submitted notebook
    sandbox: str  # the notebook's own folder (its user's, writable)
    private: str  # the runner's folder (the job, the report, logs)
    deny: list  # folders the notebook may not read
    site: str  # the sandbox's read-only site: audit hook, kernel spec, data
    answers_dir: str  # the answer run's folder
    root: str  # the folder that holds the course package
    uid: int | None  # the sandbox user (a root grader), or None
    limits: dict  # {"mem_mb", "nproc", "cpu"} per process
    exercises: list  # the notebook's exercises, if its metadata names them
    timeout: float  # seconds for the notebook run, and again for the answer run
    check_timeout: float
    cell_timeout: float
    output_cap: int  # bytes of output
    report: str  # where the runner writes its report
    hide: bool  # hide ``deny`` in a private mount namespace
    bwrap: dict | None = None  # {"exe", "hide"}: bubblewrap, for a grader that is not root
    rank_locks: list = dataclasses.field(default_factory=list)  # the 2-rank checks' turns
    started: float = 0.0  # the grader's time.time() when it started the runner

    def write(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump(dataclasses.asdict(self), fh)

    @classmethod
    def read(cls, path: str) -> Job:
        with open(path) as fh:
            return cls(**json.load(fh))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


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
