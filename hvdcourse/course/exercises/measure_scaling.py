"""Measure the scaling curve of exercise 9 on this machine (lesson: Measuring performance).

    python -m hvdcourse.course.exercises.measure_scaling --out hvdcourse/course/exercises/data/scaling_curve.json

Runs :mod:`hvdcourse.course.bench.throughput` (Horovod, one TensorFlow thread per rank) under ``horovodrun`` for
each number of workers and batch size, and writes the median images/s with a description of the
machine. Beyond the number of cores the ranks share cores: the curve then shows what that costs.
"""

from __future__ import annotations

import argparse
import json
import sys


def measure(
    workers: list,
    batch_sizes: list,
    steps: int,
    repeats: int,
    launcher: str = "gloo",
    timeout: float = 900,
) -> dict:
    """{batch per worker: {workers: median images/s}} and the raw results."""
    from hvdcourse.runtime.launch import run_ranks

    curves, raw = {}, []
    for n in workers:
        program = [
            sys.executable,
            "-m",
            "hvdcourse.course.bench.throughput",
            "--mode",
            "hvd",
            "--threads",
            "1",
            "--batch-size",
            ",".join(map(str, batch_sizes)),
            "--steps",
            str(steps),
            "--repeats",
            str(repeats),
            "--warmup-steps",
            "5",
        ]
        run = run_ranks(program, np=n, launcher=launcher, timeout=timeout)
        if not run.ok:
            raise RuntimeError(
                f"the run on {n} worker(s) failed (exit {run.returncode}):\n{run.output[-2000:]}"
            )
        for result in run.rank_results(0):  # rank 0 reports one result per batch size
            curves.setdefault(str(result["batch_per_rank"]), {})[str(n)] = round(
                result["median_images_per_s"], 1
            )
            raw.append(result)
        print(
            f"{n} worker(s): "
            + ", ".join(f"batch {b}: {c[str(n)]:.0f} images/s" for b, c in curves.items()),
            flush=True,
        )
    return {"curves": curves, "raw": raw}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--workers", default="1,2,3,4", help="numbers of workers (default 1,2,3,4)")
    parser.add_argument(
        "--batch-sizes", default="16,128", help="batch sizes per worker (default 16,128)"
    )
    parser.add_argument("--steps", type=int, default=20, help="steps per timed repeat (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    parser.add_argument(
        "--launcher",
        choices=("gloo", "mpi", "mpirun"),
        default="gloo",
        help="how the ranks start (default gloo: horovodrun --gloo)",
    )
    args = parser.parse_args(argv)
    from hvdcourse.runtime.machine import describe_machine

    machine = describe_machine()
    result = measure(
        [int(n) for n in args.workers.split(",")],
        [int(b) for b in args.batch_sizes.split(",")],
        args.steps,
        args.repeats,
        args.launcher,
    )
    doc = {
        "machine": f"{machine['cpu_model']}, {machine['logical_cores']} cores, load average "
        f"{machine['load_average_1_5_15min']} when measured",
        "source": "python -m hvdcourse.course.exercises.measure_scaling "
        + " ".join(argv or sys.argv[1:]),
        "details": machine,
        **result,
    }
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
