"""The suite's part ``slurm_scaling`` (hvdcourse/course/bench/slurm_scaling.py): ResNet-20 on synthetic
CIFAR-shaped data, images/s and scaling efficiency at batch 32 and 196 on 1 and 2 Slurm nodes, and the
committed record the going-further page of lesson 07 reads."""

import json
import os

import pytest

from conftest import ROOT
from hvdcourse.course.bench import plots, slurm_scaling

RECORD = os.path.join(ROOT, "book", "data", "bench", "slurm_scaling.json")


def test_efficiency_divides_n_nodes_by_n_times_one_node_at_the_same_batch():
    rows = [
        {"batch_per_rank": 32, "nodes": 1, "median_images_per_s": 100.0},
        {"batch_per_rank": 32, "nodes": 2, "median_images_per_s": 150.0},
        {"batch_per_rank": 196, "nodes": 2, "median_images_per_s": 300.0},  # no 1-node row
    ]
    found = slurm_scaling.efficiency(rows)
    assert [r["efficiency"] for r in found] == [1.0, 0.75, None]


def test_rank_0s_result_line_is_found_in_the_jobs_log():
    log = 'srun: noise\n[slurm_scaling] {"median_images_per_s": 12.5}\nend\n'
    assert slurm_scaling.job_record(log) == {"median_images_per_s": 12.5}
    assert slurm_scaling.job_record("no result here") is None


def test_resnet20_is_the_cifar_resnet_of_he_et_al():
    model = slurm_scaling.resnet20()
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 10)
    assert model.count_params() == 274_042  # 0.27 M, the paper's Table 6


@pytest.fixture(scope="module")
def record():
    with open(RECORD) as fh:
        return json.load(fh)


def test_the_record_has_both_batches_on_1_and_2_nodes_with_machine_and_load(record):
    found = {(r["batch_per_rank"], r["nodes"], r["ranks"]) for r in record["results"]}
    assert found == {(b, n, n) for b in slurm_scaling.BATCHES for n in slurm_scaling.NODES}
    assert len(record["machine"]["load_average_1_5_15min"]) == 3
    assert "loopback" in record["shared"]
    for row in record["results"]:
        assert len(row["load_average_before"]) == 3 and row["median_images_per_s"] > 0
        assert len(row["images_per_s"]) == row["repeats"]


def test_the_records_efficiencies_follow_from_its_images_per_second(record):
    assert record["efficiency"] == slurm_scaling.efficiency(record["results"])


def test_the_plot_draws_both_batches_on_the_talks_1_to_8_node_axis(record):
    figure = plots.slurm_scaling(record)
    rate_ax = figure.axes[0]
    assert list(rate_ax.get_xticks()) == list(range(1, 9))
    assert {line.get_label() for line in rate_ax.lines} >= {"batch 32", "batch 196"}
