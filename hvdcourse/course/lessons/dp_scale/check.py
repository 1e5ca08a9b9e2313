"""Run the data-parallel-at-scale measurements on the ranks of an MPI job (lesson: Data parallelism
at scale).

``mpirun -np 2 python -m hvdcourse.course.lessons.dp_scale.check accumulation`` (or ``compression``,
``training``): every rank initialises Horovod (``horovod.tensorflow.keras``) with one TensorFlow
thread, runs the measurement, prints one line and passes its record to
:func:`hvdcourse.runtime.results.report`, which :func:`hvdcourse.runtime.launch.run_ranks` hands back
to the tests. ``accumulation`` exits 1 when averaged accumulation differs from the large batch by
more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import json
import sys

from hvdcourse.runtime import results

CHECKS = ("accumulation", "compression", "training")


def main(argv=None) -> int:
    """Run one measurement on this rank; exit 0 unless an exactness claim fails."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("check", choices=CHECKS)
    parser.add_argument(
        "--k", type=int, default=4, help="accumulation: batches per step (default 4)"
    )
    parser.add_argument(
        "--micro-batch", type=int, default=8, help="accumulation: examples per batch and rank"
    )
    parser.add_argument(
        "--compression", choices=("none", "fp16"), default="none", help="training: compressor"
    )
    parser.add_argument("--max-steps", type=int, default=10, help="training: steps (default 10)")
    parser.add_argument(
        "--tolerance", type=float, default=1e-5, help="accumulation: largest difference accepted"
    )
    args = parser.parse_args(argv)

    import horovod.tensorflow.keras as hvd

    from hvdcourse.examples.training import set_threads

    hvd.init()
    set_threads(1)
    if args.check == "accumulation":
        from hvdcourse.course.lessons.dp_scale.accumulation import accumulation_check

        record = accumulation_check(hvd, k=args.k, micro_batch=args.micro_batch)
        ok = record["averaged"] <= args.tolerance
    elif args.check == "compression":
        from hvdcourse.course.lessons.dp_scale.compression import time_allreduces

        shapes = [(1000,), (10, 30), (7,)]
        record = {
            name: time_allreduces(shapes, getattr(hvd.Compression, name), repeats=2)
            for name in ("none", "fp16")
        }
        ok = True
    else:
        from hvdcourse.course.lessons.dp_scale.short_runs import short_training

        record = short_training(
            hvd, max_steps=args.max_steps, compression=getattr(hvd.Compression, args.compression)
        )
        ok = True
    record = {"check": args.check, "rank": hvd.rank(), "size": hvd.size(), **record}
    results.report({**record, "ok": ok})
    sys.stdout.write(f"[dp_scale] {json.dumps({**record, 'ok': ok})}\n")
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    from hvdcourse.runtime.errors import run_cli

    sys.exit(run_cli(main))
