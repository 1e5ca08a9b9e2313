"""The Horovod-and-Ray benchmark rerun with its own models (lessons: Horovod and Ray Train, side by
side; Horovod and Ray Train: the benchmark rerun).

The source trained ResNet-50 on MNIST and MobileNetV2 on Fashion-MNIST, at batch 32 on 1 and 2 GPUs,
and printed training time, test accuracy and images/s. The suite's part ``ray_models`` runs the same
two workloads through the six trainers of :mod:`hvdcourse.course.bench.side_by_side` (Keras with
Horovod, MWMS and Ray Train; PyTorch with Horovod, DDP and Ray Train), each worker one core, at 1 and
2 workers, batch 32 per worker: the models untrained (``weights=None``), the 28x28 images padded to
32x32 (``--model``), Fashion-MNIST from Debian's package (:mod:`hvdcourse.course.bench.fashion_mnist`).
On CPU cores a ResNet-50 step takes seconds, so each run is 2 epochs of a few steps: images/s from the
second epoch, accuracy after all the steps (not after an epoch of the data, as the source's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hvdcourse.course.bench import side_by_side


@dataclass(frozen=True)
class Workload:
    """One of the source's workloads: its key in the source's tables, model, data and steps here."""

    key: str  # as in hvdcourse.course.bench.published.HOROVOD_RAY_WORKLOADS
    model: str  # a --model choice
    dataset: str  # "mnist" (the course's) or "fashion-mnist"
    max_steps: int  # per epoch


WORKLOADS = (
    # ResNet-50: about 1-4 s a step on one core: 2 x 3 steps
    Workload("RN50+MNIST", "resnet50", "mnist", 3),
    Workload("MN+F-MNIST", "mobilenetv2", "fashion-mnist", 8),
)
BATCH = 32  # per worker, the source's
WORKERS = (1, 2)
EPOCHS = 2  # images/s counts the second


def data_file(dataset: str) -> str | None:
    """The ``--data`` file of a workload's data set (None: the course's MNIST)."""
    if dataset == "mnist":
        return None
    from hvdcourse.course.bench import fashion_mnist

    return fashion_mnist.prepare()


def measure(
    workloads=WORKLOADS,
    frameworks=side_by_side.KERAS + side_by_side.TORCH,
    workers=WORKERS,
    epochs: int = EPOCHS,
    timeout: float = 900,
    log=print,
) -> dict:
    """Run every workload through every framework at every size; the part's document (without the
    suite's header): settings, workloads and one row per run, each with ``workload`` and ``dataset``."""
    rows = []
    for workload in workloads:
        log(f" {workload.key}: {workload.model} on {workload.dataset}")
        found = side_by_side.measure(
            frameworks,
            (BATCH,),
            workers,
            epochs,
            workload.max_steps,
            timeout,
            log,
            model=workload.model,
            data=data_file(workload.dataset),
        )
        rows += [{**row, "workload": workload.key, "dataset": workload.dataset} for row in found]
    return {
        "batch": BATCH,
        "epochs": epochs,
        "workloads": [asdict(w) for w in workloads],
        "results": rows,
    }


def tables(doc: dict) -> list:
    """The source's three tables from a ``ray_models.json`` document: [(title, DataFrame)], rows
    (workload, framework), columns the workers."""
    import pandas as pd

    from hvdcourse.course.lessons import framework_compare

    frame = pd.DataFrame([r for r in doc["results"] if "error" not in r])
    keys = [w.key for w in WORKLOADS]  # the source's order, then the frameworks' of lesson 15
    labels = [framework_compare.lookup(k).label for k in side_by_side.KERAS + side_by_side.TORCH]

    def order(index):
        return (keys.index(index[0]), labels.index(index[1]))

    out = []
    for title, column in side_by_side.TABLES:
        table = frame.pivot_table(index=["workload", "framework"], columns="ranks", values=column)
        table = table.loc[sorted(table.index, key=order)]
        table.columns.name = "workers"
        out.append((title, table.round(4 if column == "test accuracy" else 1)))
    return out


def beside_cnn(doc: dict, cnn_doc: dict):
    """images/s at batch 32, 1 and 2 workers, of each framework with each model: the course's CNN
    (from ``ray.json``) beside the source's two models (from ``ray_models.json``); and each model's
    2-worker speed-up. Rows: framework; columns: (model, workers or ``speed-up``)."""
    import pandas as pd

    from hvdcourse.course.lessons import framework_compare

    models = [("course CNN", cnn_doc["results"])] + [
        (f"{w['model']} ({w['dataset']})", [r for r in doc["results"] if r["workload"] == w["key"]])
        for w in doc["workloads"]
    ]
    table = {}
    for name, rows in models:
        for key in side_by_side.KERAS + side_by_side.TORCH:
            label = framework_compare.lookup(key).label
            one, two = (side_by_side.value(rows, key, n, BATCH) for n in WORKERS)
            table[(name, "1 worker")] = {**table.get((name, "1 worker"), {}), label: one}
            table[(name, "2 workers")] = {**table.get((name, "2 workers"), {}), label: two}
            speedup = round(two / one, 2) if one and two else None
            table[(name, "speed-up")] = {**table.get((name, "speed-up"), {}), label: speedup}
    frame = pd.DataFrame(table)
    frame.columns = pd.MultiIndex.from_tuples(frame.columns, names=["model", "images/s"])
    return frame
