"""The suite's part ``ray_models`` (hvdcourse/course/bench/source_models.py, fashion_mnist.py): the six
trainers with the source benchmark's models, and the committed record the lesson reads."""

import gzip
import json
import os

import numpy as np
import pytest

from conftest import ROOT
from hvdcourse.course.bench import fashion_mnist, side_by_side, source_models
from hvdcourse.course.lessons import framework_compare
from hvdcourse.examples.data import DataError

RECORD = os.path.join(ROOT, "book", "data", "bench", "ray_models.json")
KEYS = side_by_side.KERAS + side_by_side.TORCH


def row(key, np_, images, workload="RN50+MNIST", model="resnet50", dataset="mnist"):
    return {
        "framework": framework_compare.lookup(key).label,
        "ranks": np_,
        "images/s": images,
        "train s": 10.0,
        "wall s": 60.0,
        "test accuracy": 0.1,
        "key": key,
        "batch": 32,
        "model": model,
        "workload": workload,
        "dataset": dataset,
    }


def test_each_workload_gives_every_trainer_its_model_and_data(monkeypatch):
    seen = []

    def fake_measure(frameworks, batches, workers, epochs, max_steps, timeout, log, model, data):
        seen.append((model, data, max_steps, batches))
        return [row(k, n, 1.0, model=model) for k in frameworks for n in workers]

    monkeypatch.setattr(side_by_side, "measure", fake_measure)
    monkeypatch.setattr(fashion_mnist, "prepare", lambda: "/cache/fashion.npz")
    doc = source_models.measure(frameworks=("keras-hvd",), log=lambda *a: None)
    assert seen == [("resnet50", None, 3, (32,)), ("mobilenetv2", "/cache/fashion.npz", 8, (32,))]
    assert [(r["workload"], r["dataset"]) for r in doc["results"]][::2] == [
        ("RN50+MNIST", "mnist"),
        ("MN+F-MNIST", "fashion-mnist"),
    ]


def test_the_trainers_options_name_the_model_and_the_data_file():
    args = side_by_side.train_args(32, 2, 3, "mobilenetv2", "/x.npz")
    assert args[args.index("--model") + 1] == "mobilenetv2"
    assert args[args.index("--data") + 1] == "/x.npz"
    assert "--model" not in side_by_side.train_args(32)  # the course CNN: the options as before


def test_the_tables_have_workload_and_framework_as_rows_and_workers_as_columns():
    doc = {"results": [row("keras-hvd", 1, 10.0), row("keras-hvd", 2, 16.0)]}
    (_, _), (_, _), (title, images) = source_models.tables(doc)
    assert title == "Images per second"
    assert images.loc[("RN50+MNIST", "Keras + Horovod"), 2] == 16.0


def test_beside_the_cnn_each_model_has_its_images_per_second_and_speed_up():
    cnn = {"results": [{**row("torch-ddp", n, 100.0 * n), "batch": 32} for n in (1, 2)]}
    doc = {
        "workloads": [{"key": "RN50+MNIST", "model": "resnet50", "dataset": "mnist"}],
        "results": [row("torch-ddp", 1, 10.0), row("torch-ddp", 2, 15.0)],
    }
    frame = source_models.beside_cnn(doc, cnn)
    assert frame.loc["PyTorch DDP", ("course CNN", "speed-up")] == 2.0
    assert frame.loc["PyTorch DDP", ("resnet50 (mnist)", "speed-up")] == 1.5


def write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_is_read_from_the_packages_idx_files_and_cut_to_the_course_sizes(tmp_path):
    images = np.arange(12 * 28 * 28).reshape(12, 28, 28) % 256
    labels = np.arange(12) % 10
    for key, name in fashion_mnist.FILES.items():
        write_idx(tmp_path / name, images if key.startswith("x") else labels)
    arrays = fashion_mnist.load(str(tmp_path), {"train": 5, "test": 3})
    assert arrays["x_train"].shape == (5, 28, 28) and arrays["y_test"].tolist() == [0, 1, 2]
    assert (arrays["x_train"] == images[:5]).all()


def test_without_the_debian_package_the_error_says_what_to_install(tmp_path):
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        fashion_mnist.load(str(tmp_path))


# ------------------------------------------------------------------------- the committed record
@pytest.fixture(scope="module")
def record():
    with open(RECORD) as fh:
        return json.load(fh)


def test_the_record_has_every_trainer_at_1_and_2_workers_for_both_workloads(record):
    found = {(r["workload"], r["key"], r["ranks"]) for r in record["results"]}
    expected = {
        (w.key, k, n) for w in source_models.WORKLOADS for k in KEYS for n in source_models.WORKERS
    }
    assert found == expected
    assert {r["batch"] for r in record["results"]} == {source_models.BATCH}
    assert record["workloads"] == [
        {"key": w.key, "model": w.model, "dataset": w.dataset, "max_steps": w.max_steps}
        for w in source_models.WORKLOADS
    ]


def test_the_record_states_machine_load_steps_and_its_rows_are_whole(record):
    assert record["machine"]["logical_cores"] >= 1
    assert len(record["machine"]["load_average_1_5_15min"]) == 3
    assert record["epochs"] == source_models.EPOCHS and record["batch"] == 32
    for r in record["results"]:
        assert "error" not in r, f"{r['framework']} {r['workload']} {r['ranks']}: {r['error']}"
        assert len(r["load_average_before"]) == 3
        assert r["images/s"] > 0 and 0 <= r["test accuracy"] <= 1
        assert r["wall s"] > r["train s"] > 0  # the command includes its start-up


def test_the_record_trains_each_model_on_its_sources_data(record):
    models = {(r["workload"], r["model"], r["dataset"]) for r in record["results"]}
    assert models == {
        ("RN50+MNIST", "resnet50", "mnist"),
        ("MN+F-MNIST", "mobilenetv2", "fashion-mnist"),
    }
