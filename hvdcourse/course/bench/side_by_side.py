"""Horovod, the framework's own strategy and Ray Train on one problem: the source benchmark's three
tables rerun (lesson: Horovod and Ray Train, side by side).

The source talk (Dey and Banerjee, 2022) gives three tables for Ray Train and Horovod: training
time, test accuracy and images/s, at 1 and 2 GPUs, batch 32. The suite's part ``ray`` measures the
same three quantities here, for six trainers that train the same model on the same data with the
same per-worker batch and learning-rate rule: Keras with Horovod, with MultiWorkerMirroredStrategy
and with Ray Train (``TensorflowTrainer``, MWMS inside), PyTorch with Horovod, with DDP and with Ray
Train (``TorchTrainer``, DDP inside); at 1 and 2 workers, at batch 32 and a larger batch. Every run
goes through :func:`hvdcourse.course.lessons.framework_compare.run` and is timed the same way (the training
loop of each epoch; images/s from the epochs after the first); the load average before each run is
kept beside it. The ratios put Ray Train at 2 workers beside each peer.
"""

from __future__ import annotations

import tempfile

from hvdcourse.course.lessons import framework_compare
from hvdcourse.runtime import machine

KERAS = ("keras-hvd", "keras-mwms", "keras-ray")
TORCH = ("torch-hvd", "torch-ddp", "torch-ray")
BATCHES = (32, 128)  # per worker: the source's 32, and a larger one
WORKERS = (1, 2)
EPOCHS = 2  # images/s counts the second; accuracy after both
# steps per epoch at most: 2 x 30 steps keep 24 runs (8 of them starting Ray) within half an hour on a
# busy 2-core machine, and reach about 0.9 test accuracy
MAX_STEPS = 30
# Ray Train at 2 workers over each peer at 2 workers: (name, numerator, denominator)
RATIOS = (
    ("ray_vs_hvd_keras", "keras-ray", "keras-hvd"),
    ("ray_vs_mwms_keras", "keras-ray", "keras-mwms"),
    ("ray_vs_hvd_torch", "torch-ray", "torch-hvd"),
    ("ray_vs_ddp_torch", "torch-ray", "torch-ddp"),
)
# the source's three tables: (title, column of a row)
TABLES = (
    ("Training time (s)", "train s"),
    ("Test accuracy", "test accuracy"),
    ("Images per second", "images/s"),
)


def train_args(
    batch: int,
    epochs: int = EPOCHS,
    max_steps: int | None = MAX_STEPS,
    model: str = "cnn",
    data: str | None = None,
) -> list:
    """The options every trainer gets: per-worker batch, epochs, and one thread per worker (a worker
    is one core, as it would be one GPU: 2 workers use twice the cores of 1); the model, and the
    data file when it is not the course's MNIST."""
    args = ["--epochs", str(epochs), "--batch-size", str(batch), "--lr", "2e-3", "--threads", "1"]
    args += ["--max-steps", str(max_steps)] if max_steps else []
    args += ["--model", model] if model != "cnn" else []
    return args + (["--data", data] if data else [])


def measure(
    frameworks=KERAS + TORCH,
    batches=BATCHES,
    workers=WORKERS,
    epochs: int = EPOCHS,
    max_steps: int | None = MAX_STEPS,
    timeout: float = 600,
    log=print,
    model: str = "cnn",
    data: str | None = None,
) -> list:
    """One row per (batch, workers, framework): framework_compare's row plus ``key``, ``batch``,
    ``load_average_before`` (and ``model`` when not the CNN); a failed run is a row with ``error``
    and the run's last lines. ``data``: a data file for ``--data`` (default: the course's MNIST)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="hvdcourse-side-by-side-") as cwd:  # checkpoints
        for batch in batches:
            for np in workers:
                for key in frameworks:
                    args = train_args(batch, epochs, max_steps, model, data)
                    extra = {"model": model} if model != "cnn" else {}
                    rows.append(measure_one(key, np, batch, args, timeout, cwd, log, extra))
    return rows


def measure_one(key: str, np: int, batch: int, args, timeout, cwd, log=print, extra=None) -> dict:
    """One run of :func:`measure` and its row (``extra``: more fields for the row)."""
    load = machine.load_average()
    run = framework_compare.run(key, np, args, timeout=timeout, cwd=cwd)
    common = {"key": key, "batch": batch, "load_average_before": load, **(extra or {})}
    try:
        row = {**framework_compare.row(key, np, run), **common}
        log(
            f"  {row['framework']:22s} {np} worker(s) batch {batch:4d}: "
            f"{row['images/s']:8.1f} images/s, {row['train s']:6.1f} s, accuracy "
            f"{row['test accuracy']:.4f} (load {load[0]})"
        )
    except Exception as err:  # a failed run is recorded, the others go on
        row = {
            "framework": framework_compare.lookup(key).label,
            "ranks": np,
            **common,
            "error": str(err).splitlines()[0],
            "output_tail": run.output.strip().splitlines()[-15:],
        }
        log(f"  ! {key} {np} worker(s) batch {batch}: {row['error']}")
        log("    " + "\n    ".join(row["output_tail"][-6:]))
    return row


def value(rows: list, key: str, np: int, batch: int, column: str = "images/s"):
    for row in rows:
        if (row["key"], row["ranks"], row["batch"]) == (key, np, batch) and column in row:
            return row[column]
    return None


def ratios(rows: list, np: int = 2) -> list:
    """Ray Train over each peer at ``np`` workers, per batch: images/s and wall time with start-up."""
    out = []
    for batch in sorted({r["batch"] for r in rows}):
        for name, top, bottom in RATIOS:
            a, b = value(rows, top, np, batch), value(rows, bottom, np, batch)
            wa, wb = (value(rows, k, np, batch, "wall s") for k in (top, bottom))
            out.append(
                {
                    "ratio": name,
                    "batch": batch,
                    "workers": np,
                    "numerator": top,
                    "denominator": bottom,
                    "images_per_s": round(a / b, 3) if a and b else None,
                    "wall_seconds": round(wa / wb, 3) if wa and wb else None,
                }
            )
    return out


def tables(doc: dict) -> list:
    """The source's three tables from a ``ray.json`` document: [(title, DataFrame)], rows the
    frameworks, columns (batch, workers)."""
    import pandas as pd

    frame = pd.DataFrame([r for r in doc["results"] if "error" not in r])
    order = {framework_compare.lookup(k).label: i for i, k in enumerate(KERAS + TORCH)}
    out = []
    for title, column in TABLES:
        table = frame.pivot_table(index="framework", columns=["batch", "ranks"], values=column)
        table = table.sort_index(key=lambda labels: labels.map(order))
        table.columns.names = ["batch/worker", "workers"]
        out.append((title, table.round(4 if column == "test accuracy" else 1)))
    return out


def ratio_table(doc: dict):
    """The ratios of a ``ray.json`` document as a table (batch, ratio) -> images/s and wall-time ratios."""
    import pandas as pd

    names = {
        name: f"{framework_compare.lookup(t).label} / {framework_compare.lookup(b).label}"
        for name, t, b in RATIOS
    }
    frame = pd.DataFrame(doc["ratios"])
    frame["Ray Train at 2 workers over"] = frame["ratio"].map(names)
    return frame.set_index(["batch", "Ray Train at 2 workers over"])[
        ["images_per_s", "wall_seconds"]
    ].rename(columns={"images_per_s": "images/s ratio", "wall_seconds": "wall-time ratio"})
