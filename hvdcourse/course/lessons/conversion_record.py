"""The full learning-rate lab of "Converting to Horovod: going further", run once and recorded.

The lab trains 15 models (4 schedules x 3 seeds on 2 ranks, the single-worker reference x 3 seeds)
and records the metrics, batch-normalisation statistics and memory the page discusses: about five
minutes on 2 cores, too long to repeat on every build of the book. ``python -m
hvdcourse.course.lessons.conversion_record`` runs the two commands the page shows and writes
``book/data/conversion_lab.json`` with the machine, its load and the commands; the page reads that
record (as lesson "Ray Train" reads the fault-tolerance record). Lesson "Converting" runs a smaller
part of the same lab live.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from hvdcourse.runtime.errors import CourseError, run_cli
from hvdcourse.runtime.paths import ROOT

RECORD = os.path.join(ROOT, "book", "data", "conversion_lab.json")
LAB = [
    *("--epochs", "3", "--batch-size", "32", "--lr", "1e-3", "--warmup-epochs", "1"),
    *("--seeds", "1", "2", "3", "--train-images", "4000"),
]
BATCH_NORM_BATCHES = ["2", "4", "8", "16", "32", "64", "128"]


def commands() -> dict:
    """The lab's two runs: ``{name: (ranks, launcher, arguments of conversion_lab)}``."""
    return {
        "two_workers": (
            2,
            "gloo",
            ["--out", "lab2.json", *LAB, "--metric-views", "--batch-norm-batches"]
            + BATCH_NORM_BATCHES,
        ),
        "one_worker": (
            1,
            "python",
            ["--out", "lab1.json", "--configs", "unscaled", "--no-memory", *LAB],
        ),
    }


def run_lab(workdir: str, timeout: float = 900) -> dict:
    """Run both commands in ``workdir``; ``{name: what conversion_lab wrote}``."""
    from hvdcourse.runtime.launch import run_ranks

    results = {}
    for name, (ranks, launcher, args) in commands().items():
        program = [sys.executable, "-m", "hvdcourse.course.lessons.conversion_lab", *args]
        run = run_ranks(program, np=ranks, launcher=launcher, timeout=timeout, cwd=workdir)
        if not run.ok:
            raise CourseError(
                f"the lab's {name} run failed (exit {run.returncode}); its last lines:\n"
                + run.output[-2500:]
            )
        with open(os.path.join(workdir, args[1])) as fh:
            results[name] = json.load(fh)
        results[name]["wall_seconds"] = round(run.seconds, 1)
    return results


def record(path: str, results: dict) -> dict:
    """Write the runs with the machine they ran on and the commands that made them."""
    from hvdcourse.runtime.machine import describe_machine

    data = {
        "machine": describe_machine(),
        "commands": {
            name: f"{launcher} x{ranks}: python -m hvdcourse.course.lessons.conversion_lab {' '.join(args)}"
            for name, (ranks, launcher, args) in commands().items()
        },
        **results,
    }
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(path + ".tmp", path)
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.lessons.conversion_record",
        description="Run the full learning-rate lab (about 5 minutes on 2 cores) and record it.",
    )
    parser.add_argument("--out", default=RECORD, help=f"record to write (default: {RECORD})")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (hang guard)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="conversion-record-") as workdir:
        results = run_lab(workdir, args.timeout)
    record(args.out, results)
    print(f"[conversion_record] wrote {args.out} in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, stop_on_sigterm=True))
