"""``hvdcourse-lint --run``: the script on 2 ranks for a few steps, and what only a run shows
(lessons: Converting a Keras MNIST script to Horovod; PyTorch with Horovod, and DDP).

The script starts under the course's launcher (:func:`hvdcourse.runtime.launch.run_ranks`:
``mpirun``, else ``horovodrun --gloo``, for Horovod; ``torchrun`` for DDP) with a step limit and a time limit; each
rank runs it inside :mod:`~hvdcourse.course.check.lint.probe`, in a folder of its own whose
entries link to those of the learner's folder, so the files a rank writes are told apart. Then:

* ``run-weights``: the ranks' weights must be identical before the first update (after the
  broadcast; PyTorch) and after every step (the gradients averaged);
* ``run-writes``: only rank 0 may write files;
* ``run-data``: the ranks must train on different batches.

A script that cannot run here gets one line saying why (:attr:`RunOutcome.problem`).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from hvdcourse.course.check.lint.facts import Facts
from hvdcourse.course.check.lint.probe import KIND
from hvdcourse.course.check.lint.rules import Finding
from hvdcourse.course.check.lint.source import Script
from hvdcourse.runtime.errors import CourseError
from hvdcourse.runtime.launch import run_ranks


@dataclass
class RunOutcome:
    """What ``--run`` found: findings (rule ``run-*``), notes, or one line saying why the script
    could not run here (``problem``); ``records``: each rank's record, for a closer look."""

    findings: list = field(default_factory=list)
    problem: str = ""
    records: list = field(default_factory=list)
    seconds: float = 0.0


def default_launcher(facts: Facts) -> str:
    """torchrun for DDP; for Horovod mpirun where MPI is installed (its start costs the least CPU
    time), else horovodrun --gloo."""
    if facts.flavour == "ddp":
        return "torchrun"
    return "mpirun" if shutil.which("mpirun") else "gloo"


def rank_folders(workdir: str, np: int, source: str) -> None:
    """``workdir/rank-R`` for each rank, each holding a link to every entry of ``source``."""
    for rank in range(np):
        folder = os.path.join(workdir, f"rank-{rank}")
        os.makedirs(folder)
        for name in os.listdir(source):
            os.symlink(os.path.join(source, name), os.path.join(folder, name))


def new_files(folder: str) -> list:
    """Files under ``folder`` that are not links (what the rank created there)."""
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(here, d))]
        for name in files:
            path = os.path.join(here, name)
            if not os.path.islink(path) and not name.endswith(".pyc"):
                found.append(os.path.relpath(path, folder))
    return sorted(found)


def run_script(
    path: str,
    args=(),
    np: int = 2,
    steps: int = 2,
    timeout: float = 180,
    cwd: str | None = None,
    launcher: str | None = None,
) -> RunOutcome:
    """Run the script at ``path`` (with ``args``) on ``np`` ranks for ``steps`` steps, at most
    ``timeout`` seconds, from the folder ``cwd`` (default: this one), under ``launcher`` (default:
    the course's choice for the script); check its ranks."""
    with open(path, encoding="utf-8") as fh:
        facts = Facts(Script(fh.read(), path))
    if not facts.distributed:
        return RunOutcome(
            problem=f"{path}: --run: cannot run it here: it starts neither Horovod nor a PyTorch "
            "process group (run it on one worker, or convert it first)"
        )
    launcher = launcher or default_launcher(facts)
    source = os.path.abspath(cwd or os.getcwd())
    workdir = tempfile.mkdtemp(prefix="hvdlint-run-")
    try:
        rank_folders(workdir, np, source)
        program = [
            sys.executable,
            "-m",
            "hvdcourse.course.check.lint.probe",
            "--steps",
            str(steps),
            "--workdir",
            workdir,
            os.path.abspath(path),
            *args,
        ]
        try:
            run = run_ranks(program, np=np, launcher=launcher, timeout=timeout, cwd=workdir)
        except CourseError as err:  # no launcher here (horovodrun, torchrun)
            return RunOutcome(problem=f"{path}: --run: cannot run it here: {err}")
        records = [
            next((r for r in (rank or []) if r.get("kind") == KIND), None) for rank in run.results
        ]
        created = [new_files(os.path.join(workdir, f"rank-{r}")) for r in range(np)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    outcome = RunOutcome(records=records, seconds=run.seconds)
    flavour = facts.flavour
    errors = [r["error"] for r in records if r and r.get("error")]
    if errors:
        outcome.problem = f"{path}: --run: cannot run it here: {errors[0]}"
        return outcome
    if any(r is None for r in records):
        if run.timed_out:
            outcome.problem = (
                f"{path}: --run: the run did not reach step {steps} within {timeout:.0f} s "
                "(a slow start, or ranks waiting in a collective that others never call; "
                "raise --timeout to tell)"
            )
        else:
            tail = " ".join((run.failure or run.output.strip().splitlines()[-1:] or [""])[0:1])
            outcome.problem = (
                f"{path}: --run: cannot run it here: a rank ended without a record ({tail[:160]})"
            )
        return outcome
    outcome.findings = compare(path, flavour, records, created, workdir)
    return outcome


def compare(path: str, flavour: str, records: list, created: list, workdir: str) -> list:
    """The ``run-*`` findings from the ranks' records."""
    found = []
    first = records[0]

    def finding(rule, line, what, note=False):
        found.append(Finding(path, line or 1, rule, what, flavour, note=note))

    # weights: identical at the first step and after each step
    by_step = [dict((step, (digest, line)) for step, digest, line in r["weights"]) for r in records]
    steps = sorted(set.intersection(*(set(b) for b in by_step))) if by_step else []
    if not steps:
        finding(
            "run-weights",
            1,
            "no training step was seen (a loop the probe does not watch, or the script ended "
            "first): the ranks' weights were not compared",
            note=True,
        )
    for step in steps:
        digests = {b[step][0] for b in by_step}
        if len(digests) > 1:
            line = by_step[0][step][1] or first.get("weights_line")
            when = "before the first update" if step == 0 else f"after step {step}"
            cause = (
                "rank 0's weights were not broadcast to the others"
                if step <= 1
                else "the ranks apply different updates"
            )
            finding("run-weights", line, f"on 2 ranks the weights differ {when}: {cause}")
            break
    # files: only rank 0 writes
    for rank, record in enumerate(records[1:], 1):
        prefix = os.path.join(workdir, f"rank-{rank}") + os.sep
        paths = [
            (p[len(prefix) :] if p.startswith(prefix) else p, line) for p, line in record["written"]
        ]
        seen = {p for p, _ in paths}
        paths += [(p, None) for p in created[rank] if p not in seen]
        if paths:
            name, line = paths[0]
            more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
            finding(
                "run-writes",
                line,
                f"rank {rank} wrote {name}{more}: every rank writes what rank 0 alone should",
            )
    # data: the ranks' batches differ
    data = [dict((step, (digest, line)) for step, digest, line in r["data"]) for r in records]
    common = sorted(set.intersection(*(set(d) for d in data))) if data else []
    if common and all(len({d[s][0] for d in data}) == 1 for s in common):
        line = data[0][common[0]][1]
        finding(
            "run-data",
            line,
            f"on 2 ranks the first batch of each of the {len(common)} step(s) was the same on "
            "every rank: they all train on the same data",
        )
    return found
