"""The grading options, read once from the command line into :class:`Options` (lesson: Instructor
guide).

The local grader and each task of a Slurm array grade with the same options; nothing changes them
after :func:`Options.from_args` (the limits of a notebook, the sandbox's choices, how many at once).
"""

from __future__ import annotations

import dataclasses
import os

DEFAULT_LIMITS = {"mem_mb": 6144, "nproc": 512, "cpu": 900}
# seconds the runner gets beyond the notebook's limits to shut the kernel down and report
GRACE = 60


@dataclasses.dataclass(frozen=True)
class Options:
    """How to grade each notebook: limits, sandbox, and how many at once."""

    timeout: float = 600
    cell_timeout: float | None = None
    output_cap: float = 2000  # kB
    mem_mb: int = DEFAULT_LIMITS["mem_mb"]
    nproc: int = DEFAULT_LIMITS["nproc"]
    cpu: int = DEFAULT_LIMITS["cpu"]
    deny: tuple = ()
    no_hide: bool = False
    unsafe_no_sandbox: bool = False
    keep: bool = False
    jobs: int = 1  # notebooks at once
    rank_slots: int = 1  # 2-rank checks at once

    # what a Slurm task needs of them (the task grades one notebook at a time)
    SHARED = (
        "timeout",
        "cell_timeout",
        "output_cap",
        "mem_mb",
        "nproc",
        "cpu",
        "deny",
        "no_hide",
        "unsafe_no_sandbox",
        "keep",
    )

    @classmethod
    def from_args(cls, args, jobs: int = 1, rank_slots: int = 1) -> Options:
        """The options of the parsed command line ``args`` (see :func:`add_options`)."""
        given = {name: getattr(args, name) for name in cls.SHARED if hasattr(args, name)}
        given["deny"] = tuple(given.get("deny") or ())
        return cls(**given, jobs=jobs, rank_slots=rank_slots)

    def shared(self) -> dict:
        """The options a Slurm task grades with, as JSON."""
        shared = {name: getattr(self, name) for name in self.SHARED}
        shared["deny"] = list(self.deny)
        return shared

    @property
    def limits(self) -> dict:
        """Each process's limits: address space (MB), processes of the sandbox, CPU seconds."""
        return {"mem_mb": self.mem_mb, "nproc": self.nproc, "cpu": self.cpu}

    @property
    def notebook_budget(self) -> float:
        """Seconds one notebook may take at most: its run, its answer run and the grace period."""
        return 2 * self.timeout + GRACE


def jobs_auto(cores: int | None = None) -> tuple:
    """(notebooks at once, rank checks at once) for ``cores`` cores: every core runs a notebook, and the
    2-rank checks, which use 2 cores each, take turns so that they never share a core."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, cores), max(1, cores // 2)


def add_options(parser) -> None:
    """The grading options, shared by the local and the Slurm modes."""
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds per notebook (default 600)"
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=None,
        help="seconds per student cell (default: the notebook's limit); the checks get the rest",
    )
    parser.add_argument(
        "--output-cap", type=float, default=2000, help="kB of output per notebook (default 2000)"
    )
    parser.add_argument(
        "--mem-mb",
        type=int,
        default=DEFAULT_LIMITS["mem_mb"],
        help=f"address space per process, MB (default {DEFAULT_LIMITS['mem_mb']}: TensorFlow with "
        "MPI maps about 3 GB; 0 = no limit)",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        default=DEFAULT_LIMITS["nproc"],
        help=f"processes and threads of the sandbox user, or of the bubblewrap sandbox when the "
        f"grader is not root (default {DEFAULT_LIMITS['nproc']})",
    )
    parser.add_argument(
        "--cpu",
        type=int,
        default=DEFAULT_LIMITS["cpu"],
        help=f"CPU seconds per process (default {DEFAULT_LIMITS['cpu']})",
    )
    parser.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="FOLDER",
        help="another folder the notebooks may not read, hidden like the solutions (repeat; "
        "hvdcourse-class passes its course folder, where the other learners' notebooks are)",
    )
    parser.add_argument(
        "--no-hide",
        action="store_true",
        help="do not hide the denied folders (mount namespace, or bubblewrap when not root); the "
        "audit hook still denies",
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade even where the notebooks cannot be confined (not root, and no bubblewrap that "
        "works): they then run as your own user, under the audit hook alone",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep each notebook's sandbox folder (debugging)"
    )
