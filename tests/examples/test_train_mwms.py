"""hvdcourse.examples.train_mwms: TF_CONFIG for local workers, and a 2-worker run that ends in identical weights."""

import json
import os

import pytest

from conftest import PYTHON
from hvdcourse.examples.data import load_mnist
from hvdcourse.runtime.errors import UsageError
from hvdcourse.runtime.launch import run_ranks
from hvdcourse.examples.train_mwms import configure_worker, free_ports, tf_config, without_option


def test_tf_config_lists_every_worker_and_names_this_one():
    config = tf_config(["localhost:1", "localhost:2"], 1)
    assert config == {
        "cluster": {"worker": ["localhost:1", "localhost:2"]},
        "task": {"type": "worker", "index": 1},
    }


def test_free_ports_are_distinct():
    ports = free_ports(4)
    assert len(set(ports)) == 4 and all(p > 0 for p in ports)


def test_worker_index_comes_from_the_launcher_rank():
    env = {"OMPI_COMM_WORLD_RANK": "1"}
    index, cluster = configure_worker("localhost:5000,localhost:5001", env)
    assert index == 1 and cluster == ["localhost:5000", "localhost:5001"]
    assert json.loads(env["TF_CONFIG"])["task"]["index"] == 1


def test_a_cluster_without_a_launcher_rank_is_refused_with_a_hint():
    with pytest.raises(UsageError, match="--workers N"):
        configure_worker("localhost:5000,localhost:5001", {})


def test_spawner_options_are_not_passed_to_the_workers():
    assert without_option(["--workers", "2", "--epochs", "1", "--timeout=5"], "--workers") == [
        "--epochs",
        "1",
        "--timeout=5",
    ]
    assert without_option(["--timeout=5", "--epochs", "1"], "--timeout") == ["--epochs", "1"]


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    cwd = str(tmp_path_factory.mktemp("mwms"))
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.examples.train_mwms",
            "--workers",
            "2",
            "--epochs",
            "2",
            "--batch-size",
            "32",
            "--lr",
            "2e-3",
            "--checkpoint-dir",
            "ckpt",
            "--metrics-json",
            "metrics.json",
            "--timeout",
            "240",
        ],
        np=1,
        launcher="python",
        timeout=300,
        cwd=cwd,
    )
    # both ends of the output: the first worker's error can be far above the last lines
    assert run.ok, run.output[:4000] + "\n[...]\n" + run.output[-4000:]
    return cwd, run


def test_both_workers_end_with_bit_identical_weights(two_workers):
    _, run = two_workers
    # the workers' records, handed on by the process that started them
    digests = {r["rank"]: r["weights_sha256"] for r in run.records("final")}
    assert sorted(digests) == [0, 1] and digests[0] == digests[1]


def test_worker_0_keeps_checkpoints_and_metrics_of_the_whole_test_set(two_workers):
    cwd, _ = two_workers
    assert any(f.startswith("ckpt-2") for f in os.listdir(os.path.join(cwd, "ckpt")))
    metrics = json.load(open(os.path.join(cwd, "metrics.json")))
    assert metrics["workers"] == 2 and metrics["examples"] == len(load_mnist(quiet=True).x_test)
