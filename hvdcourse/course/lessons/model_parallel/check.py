"""Run the model-parallel checks on the ranks of an MPI job (lesson: Model parallelism by hand).

``mpirun -np 2 python -m hvdcourse.course.lessons.model_parallel.check tensor`` (or ``pipeline``, ``zero``,
``bubble``): every rank runs the check, prints one line and passes its record to
:func:`hvdcourse.runtime.results.report`, which :func:`hvdcourse.runtime.launch.run_ranks` hands back
to the tests. The exit code is 0 when every comparison on this rank is within ``--tolerance``.
"""

from __future__ import annotations

import argparse
import json
import sys

from hvdcourse.runtime import results

CHECKS = ("tensor", "pipeline", "zero", "bubble")


def _within(record: dict, tolerance: float) -> bool:
    if "max_abs_diff" in record:
        diffs = record["max_abs_diff"]
        values = diffs.values() if isinstance(diffs, dict) else diffs
        return max(values) <= tolerance
    if "max_abs_diff_grads" in record:
        ok = record["max_abs_diff_grads"] <= tolerance
        if record["loss"] is not None:
            ok = ok and abs(record["loss"] - record["reference_loss"]) <= tolerance
        return ok
    return True


def main(argv=None) -> int:
    """Run one check on this rank; exit 0 if its comparisons are within the tolerance."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("check", choices=CHECKS)
    parser.add_argument("--hidden", type=int, default=8, help="tensor: hidden size (default 8)")
    parser.add_argument("--ffn", type=int, default=16, help="tensor: inner size (default 16)")
    parser.add_argument(
        "--schedule", default="gpipe", help="pipeline, bubble: gpipe or 1f1b (default gpipe)"
    )
    parser.add_argument(
        "--micro-batches",
        type=int,
        nargs="+",
        default=[4],
        help="pipeline: micro-batches (first value); bubble: the values to measure",
    )
    parser.add_argument("--batch", type=int, default=8, help="pipeline, bubble: batch size")
    parser.add_argument("--width", type=int, default=8, help="pipeline, bubble: layer width")
    parser.add_argument(
        "--parameters", type=int, default=1001, help="zero: number of weights (default 1001)"
    )
    parser.add_argument("--steps", type=int, default=5, help="zero: Adam steps (default 5)")
    parser.add_argument(
        "--tolerance", type=float, default=1e-10, help="largest difference accepted"
    )
    args = parser.parse_args(argv)

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if args.check == "tensor":
        from hvdcourse.course.lessons.model_parallel.tensor_parallel import compare_with_reference

        record = compare_with_reference(comm, hidden=args.hidden, ffn=args.ffn)
    elif args.check == "pipeline":
        from hvdcourse.course.lessons.model_parallel.pipeline import compare_with_reference

        record = compare_with_reference(
            comm, args.schedule, args.micro_batches[0], width=args.width, batch=args.batch
        )
    elif args.check == "zero":
        from hvdcourse.course.lessons.model_parallel.zero import compare_with_data_parallel

        record = compare_with_data_parallel(comm, n=args.parameters, steps=args.steps)
    else:
        from hvdcourse.course.lessons.model_parallel.pipeline import measure_bubble

        rows = measure_bubble(
            comm,
            args.micro_batches,
            kind=args.schedule,
            width=args.width,
            batch=args.batch,
            repeats=1,
        )
        record = {"rank": comm.Get_rank(), "size": comm.Get_size(), "bubble": rows}
    record = {"check": args.check, **record}
    ok = _within(record, args.tolerance)
    results.report({**record, "ok": ok})
    sys.stdout.write(f"[model_parallel] {json.dumps({**record, 'ok': ok})}\n")
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    from hvdcourse.runtime.errors import run_cli

    sys.exit(run_cli(main))
