"""``hvdcourse-grade``: grade a class's exercise notebooks in one command (lesson: Instructor guide).

    hvdcourse-grade SUBMISSIONS --out RESULTS [--timeout S] [--jobs N|auto] [--mem-mb M] [--slurm]

SUBMISSIONS holds one folder per student with their notebooks (``alice/ex04_ring_allreduce.ipynb``),
or one notebook per student (``alice.ipynb``). Every notebook runs in its own temporary folder, in a
fresh course kernel, with a time limit, an output cap and limits on memory, processes and CPU time,
under the sandbox of :mod:`hvdcourse.course.grading.audit` (no reading of the solutions, the exercise
sources, the tests or other submissions; no writing outside its folder). When the grader runs as
root, those folders are also hidden in a private mount namespace (``unshare``) and every notebook runs
as a user of its own; when it does not, the notebook's processes run under bubblewrap
(:mod:`hvdcourse.course.grading.bwrap`: the system and the course read-only, no home folders, a
private /tmp, no network, those folders hidden). Where neither can be had, the grader refuses to run
unless told ``--unsafe-no-sandbox``. The checks never run where the student's code runs: the runner
(:mod:`hvdcourse.course.grading.runner`) records what the student's functions return as data, and the
judge (:mod:`hvdcourse.course.grading.judge`), a fresh process loaded from the course's own files, decides
the points. Checks of distributed code run on 2 MPI ranks. Writes ``scores.csv``,
``feedback/<student>.md``, ``summary.md`` and ``results.json`` into RESULTS, with a progress bar.
A broken submission gets its own result and never stops the batch.

The command's stages: :func:`read_options`, :func:`discover`, grade (on this machine,
:mod:`hvdcourse.course.grading.local`, or as a Slurm array, :mod:`hvdcourse.course.grading.slurm`),
:func:`write_results`. Its throughput is measured by
:mod:`hvdcourse.course.bench.grading_throughput`, which runs this command.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from hvdcourse.course.grading import local, slurm
from hvdcourse.course.grading import report as reporting
from hvdcourse.course.grading.local import progress_line, sandbox_of
from hvdcourse.course.grading.options import Options, add_options, jobs_auto
from hvdcourse.runtime.errors import UsageError, run_cli

# the names this command's tests and the instructor guide read here
__all__ = [
    "add_options",
    "discover",
    "grade_class",
    "jobs_auto",
    "main",
    "progress_line",
    "sandbox_of",
    "write_results",
]
RECORD_MOVED = (
    "--record moved: the grader's throughput is measured by "
    "python -m hvdcourse.course.bench.grading_throughput record {submissions} --out {out} --jobs "
    "{jobs} --data {record} (it runs this command and records the run)"
)


def discover(root: str) -> list:
    """[(student, [notebook paths])] from a submissions folder, sorted by student."""
    students = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            found = sorted(
                os.path.join(d, f)
                for d, dirs, files in os.walk(path)
                for f in files
                if f.endswith(".ipynb") and ".ipynb_checkpoints" not in d
            )
            students[entry] = found
        elif entry.endswith(".ipynb"):
            students.setdefault(entry[: -len(".ipynb")], []).append(path)
    return sorted(students.items())


def parser() -> argparse.ArgumentParser:
    """``hvdcourse-grade``'s command line."""
    parser = argparse.ArgumentParser(
        prog="hvdcourse-grade",
        description="Grade a class's exercise notebooks: every notebook runs in a sandbox "
        "with time, memory, process and CPU limits; writes scores.csv, feedback/<student>.md, summary.md and "
        "results.json.",
    )
    parser.add_argument("submissions", help="folder with one folder (or one .ipynb) per student")
    parser.add_argument("--out", required=True, help="folder for scores.csv, feedback/, summary.md")
    parser.add_argument(
        "--jobs",
        default="1",
        help="notebooks graded at once, or 'auto' (one per core; the "
        "2-rank checks take turns so they never share a core); default 1",
    )
    add_options(parser)
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="grade on Slurm: one array task per student (or per notebook), each with these "
        "limits; waits for the tasks and writes the same files as a local run",
    )
    parser.add_argument(
        "--slurm-per",
        choices=("student", "notebook"),
        default="student",
        help="what one array task grades (default: student)",
    )
    parser.add_argument(
        "--slurm-wait",
        type=float,
        default=None,
        help="seconds to wait for the whole array before it is cancelled (default: every "
        "notebook's time limit, one after the other)",
    )
    parser.add_argument(
        "--slurm-dir",
        default=None,
        help="shared folder for the array's tasks, logs and results (default: OUT/slurm); the "
        "compute nodes must see it, the submissions and the course at the same paths",
    )
    parser.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an sbatch option for the array, e.g. --sbatch=--partition=short "
        "--sbatch=--cpus-per-task=2 (repeat for several)",
    )
    parser.add_argument(
        "--record",
        default=None,
        metavar="JSON",
        help="moved: python -m hvdcourse.course.bench.grading_throughput record measures and "
        "records a run (it says how)",
    )
    return parser


def read_options(argv) -> tuple:
    """(parsed command line, :class:`~hvdcourse.course.grading.options.Options`) of ``argv``."""
    command = parser()
    args = command.parse_args(argv)
    if args.record:
        raise UsageError(
            RECORD_MOVED.format(
                submissions=args.submissions, out=args.out, jobs=args.jobs, record=args.record
            )
        )
    if not os.path.isdir(args.submissions):
        raise UsageError(
            f"{args.submissions!r} is not a folder; give the folder of the students' notebooks"
        )
    if args.jobs == "auto":
        jobs, rank_slots = jobs_auto()
    else:
        try:
            jobs = rank_slots = int(args.jobs)
        except ValueError:
            command.error(f"--jobs must be a number or 'auto', not {args.jobs!r}")
    if args.timeout <= 0 or jobs < 1:
        command.error("--timeout must be > 0 and --jobs >= 1")
    return args, Options.from_args(args, jobs=jobs, rank_slots=rank_slots)


def grade_class(argv=None) -> int:
    """Grade a class from the command line ``argv``; raises :class:`~hvdcourse.runtime.errors.UsageError` on bad input."""
    args, options = read_options(argv)
    students = discover(args.submissions)
    if not students:
        raise UsageError(
            f"no notebooks found in {args.submissions}: it should hold one folder per student "
            "with their .ipynb files"
        )
    os.makedirs(args.out, exist_ok=True)
    start = time.monotonic()
    if args.slurm:
        array = slurm.Array(
            work=os.path.abspath(args.slurm_dir or os.path.join(args.out, "slurm")),
            per=args.slurm_per,
            wait=args.slurm_wait,
            sbatch=tuple(args.sbatch),
        )
        outcomes = slurm.grade(array, options, args.submissions, args.out, students)
    else:
        outcomes = local.grade_local(options, args.submissions, args.out, students)
    return write_results(args.out, students, outcomes, time.monotonic() - start)


def write_results(out: str, students: list, outcomes: list, seconds: float) -> int:
    """scores.csv, feedback/, summary.md and results.json in ``out`` (see :mod:`~hvdcourse.course.grading.report`)."""
    from hvdcourse.course.exercises.checks import EXERCISES

    by_student = {s: {"name": s, "notebooks": []} for s, _ in students}
    for student, outcome in outcomes:
        by_student[student]["notebooks"].append(outcome)
    exercises = {e.id: e.title for e in EXERCISES.values()}
    written = reporting.write_all(out, list(by_student.values()), exercises, seconds)
    print(
        f"wrote {written['csv']}, {written['summary']} and {len(by_student)} feedback file(s) in "
        f"{written['feedback']}",
        flush=True,
    )
    return 0


def main(argv=None) -> int:
    """The ``hvdcourse-grade`` command: :func:`grade_class` with the course's one-line errors and exit codes."""
    return run_cli(grade_class, argv)


if __name__ == "__main__":
    sys.exit(main())
