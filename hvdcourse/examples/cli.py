"""Command-line options shared by the course's training scripts (lesson: Converting a Keras MNIST script to Horovod)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def port_number(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {text}")
    return value


class OneWriteParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage error is ONE write to stderr. argparse writes the usage and the
    error line apart; when srun or mpirun ends a job as soon as a rank exits, the second write can be
    lost, and the log then shows the usage without saying what was wrong."""

    def error(self, message):
        self.exit(2, f"{self.format_usage()}{self.prog}: error: {message}\n")


def training_parser(
    description: str,
    checkpoints: bool = True,
    warmup: bool = True,
    live_metrics: bool = False,
    models: bool = False,
) -> argparse.ArgumentParser:
    """The options every trainer shares, with the same names so the scripts read alike.

    ``checkpoints=False`` leaves out ``--checkpoint-dir`` and ``--no-resume`` (``train_elastic`` keeps
    its state in memory); ``warmup=False`` leaves out ``--warmup-epochs``; ``live_metrics=True`` adds
    ``--metrics-port`` (for the trainers that serve :mod:`hvdcourse.examples.live_metrics`);
    ``models=True`` adds ``--model`` (the trainers of the framework comparison: the course's CNN, or
    the Horovod-and-Ray benchmark's ResNet-50 or MobileNetV2).
    """
    p = OneWriteParser(description=description)
    p.add_argument("--epochs", type=positive_int, default=3, help="number of epochs (default 3)")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=64,
        help="batch size of ONE worker (default 64); the effective batch is this x workers",
    )
    p.add_argument(
        "--lr",
        type=positive_float,
        default=1e-3,
        help="learning rate for one worker (default 1e-3); the distributed trainers scale it "
        "for the workers (Adam: by the square root of their number)",
    )
    if warmup:
        p.add_argument(
            "--warmup-epochs",
            type=non_negative_float,
            default=1.0,
            help="epochs of linear LR warm-up to the scaled rate (Horovod only; 0 = none)",
        )
    p.add_argument(
        "--data",
        default=None,
        metavar="NPZ",
        help="MNIST .npz file (default: Keras' cache, else the offline MNIST subset made by 'make env')",
    )
    p.add_argument(
        "--download", action="store_true", help="try downloading MNIST if it is not cached"
    )
    if models:
        from hvdcourse.examples.model import MODELS

        p.add_argument(
            "--model",
            choices=MODELS,
            default=MODELS[0],
            help="the model: the course's CNN (default), or ResNet-50 or MobileNetV2 (untrained) "
            "on the images padded to 32x32",
        )
    if checkpoints:
        p.add_argument(
            "--checkpoint-dir",
            default="checkpoints",
            help="where checkpoints go (default ./checkpoints)",
        )
        p.add_argument(
            "--no-resume",
            dest="resume",
            action="store_false",
            help="start from scratch even if a checkpoint exists",
        )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=None,
        help="cap the steps per epoch (quick runs and tests)",
    )
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="TensorFlow threads per process (default 0: cores / processes on this node)",
    )
    p.add_argument(
        "--metrics-json",
        default=None,
        metavar="FILE",
        help="write the final metrics as JSON (Horovod: rank 0 only)",
    )
    if live_metrics:
        p.add_argument(
            "--metrics-port",
            type=port_number,
            default=None,
            metavar="BASE",
            help="serve live metrics for Prometheus: each rank on port BASE + its local rank "
            "(default: off)",
        )
    return p


def run_trainer(main, argv=None, **kwargs) -> int:
    """Run a trainer's ``main(argv, **kwargs)`` as a command: :func:`~hvdcourse.runtime.errors.run_cli`
    plus a line naming the rank when the trainer crashes.

    A :class:`~hvdcourse.runtime.errors.CourseError` (a corrupt data file or checkpoint, a folder
    that cannot be written) is a problem for the user to fix, not a bug: one line
    ``hvdcourse: error: <what to do>`` and its exit code (2), as every course command
    (:func:`hvdcourse.runtime.errors.run_cli`). Any other exception is a crash: one line names
    the rank (so the run's summary can tell which rank failed first), then its traceback follows;
    a rank that only saw Horovod shut down because another rank failed says so in that one line and
    exits with status 1 (its traceback would bury the other rank's message).
    """
    import sys

    from hvdcourse.runtime.errors import run_cli

    try:
        return run_cli(main, argv, **kwargs)
    except Exception as err:  # a crash: name the rank in one line, then show the traceback
        print(crash_line(err), file=sys.stderr, flush=True)
        if _horovod_shut_down(err):
            # this rank only saw the shutdown: the cause (and its message) is another rank's
            return 1
        raise


def _horovod_shut_down(err: BaseException) -> bool:
    return "Horovod has been shut down" in str(err)


def crash_line(err: BaseException) -> str:
    """``[hvdcourse] rank N failed: ...`` for the rank that raised ``err`` first, or
    ``[hvdcourse] rank N stopped: ...`` for a rank that only saw Horovod shut down because of another."""
    from hvdcourse.runtime.ranks import launcher_rank

    rank = launcher_rank()
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if _horovod_shut_down(err):
        return f"[hvdcourse] rank {rank} stopped: Horovod was shut down (another rank failed, exited or stalled)"
    return f"[hvdcourse] rank {rank} failed: {type(err).__name__}: {text}"[:300]
