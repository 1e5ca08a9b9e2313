"""Live metrics of a 2-rank run, scraped by a real Prometheus (hvdcourse.examples.live_metrics,
hvdcourse.course.services.monitoring; lesson: Watch a training run: Prometheus and a straggler).

One module-scoped run: Prometheus and the node exporter on this machine, a 2-rank train_hvd with
``--metrics-port`` and rank 1 slowed down for the second half of its one epoch, the ranks' endpoints read while it
trains, Prometheus queried after it. One more, without Prometheus: a short 2-rank train_torch_hvd with
``--metrics-port`` and rank 1 slowed down, its endpoints read while it trains. Last, the metrics port base
that the package and the playbook share."""

import os
import re
import sys
import threading
import time
import urllib.request
import uuid
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT
from hvdcourse.course.lessons import faults
from hvdcourse.course.services import monitoring
from hvdcourse.examples.live_metrics import TRAINING_METRICS
from hvdcourse.runtime.errors import MissingToolError, error_line
from hvdcourse.runtime.launch import run_ranks

MARKER = "HVDCOURSE_MONITORING_TEST"
# one epoch of 50 steps, rank 1 slow in the second half; one epoch, because at an epoch's end rank 1
# waits for rank 0 to write the checkpoint (seconds, on a loaded machine)
STEPS, SLOW_FROM, SLOW_SECONDS = 50, 26, 0.2
# the PyTorch trainer's run: rank 1 slow from its first step (its ranks start their steps together,
# after the broadcast of the weights)
TORCH_STEPS = 8


def read_endpoints(ports, snapshots, stop):
    """Append ``{port: text}`` of every port, several times a second, until ``stop`` is set."""
    while not stop.is_set():
        texts = {}
        for port in ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                    texts[port] = r.read().decode()
            except OSError:
                pass
        if len(texts) == len(ports):
            snapshots.append(texts)
        stop.wait(0.1)


def sample(text, name, rank, opening="{"):
    """The value of ``name{rank="<rank>"}`` in a scraped text (``name`` may end with other labels)."""
    found = re.search(rf'^{re.escape(name + opening)}rank="{rank}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def run_with_slow_rank(trainer, steps, ports, cwd, slow_from=1, timeout=300):
    """Train ``trainer`` on 2 ranks for one epoch of ``steps`` steps with ``--metrics-port ports[0]``,
    rank 1 sleeping SLOW_SECONDS per step from its step ``slow_from`` on, while
    :func:`read_endpoints` reads both ranks' endpoints. Returns the run and the readings."""
    snapshots, stop = [], threading.Event()
    reader = threading.Thread(target=read_endpoints, args=(ports, snapshots, stop), daemon=True)
    reader.start()
    try:
        run = run_ranks(
            [
                sys.executable,
                "-m",
                "hvdcourse.course.lessons.faults",
                trainer,
                "--epochs",
                "1",
                "--max-steps",
                str(steps),
                "--warmup-epochs",
                "0",
                "--metrics-port",
                str(ports[0]),
            ],
            np=2,
            launcher="mpirun",
            timeout=timeout,
            cwd=str(cwd),
            env={
                "HVDCOURSE_SLOW_RANK": "1",
                "HVDCOURSE_SLOW_FROM_STEP": str(slow_from),
                "HVDCOURSE_SLOW_SECONDS": str(SLOW_SECONDS),
            },
        )
    finally:
        stop.set()
        reader.join()
    return run, snapshots


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    work = tmp_path_factory.mktemp("monitoring")
    ports = monitoring.free_port_block(2)
    marker = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MARKER, marker)  # Prometheus, the node exporter and the ranks inherit it
        with monitoring.Prometheus(rank_ports=ports) as prom:
            start = time.time()
            run, snapshots = run_with_slow_rank(
                "hvdcourse.examples.train_hvd", STEPS, ports, work, SLOW_FROM, timeout=600
            )
            end = time.time()
            names = "|".join((*TRAINING_METRICS, "process_cpu_seconds_total"))
            series = prom.query_range(
                f'{{job="ranks", __name__=~"({names})(_sum)?"}}', start, end, step=1
            )
            node_cpu = prom.query_range("node_cpu_seconds_total", start, end, step=1)
        left = faults.leftover_processes(MARKER, marker, wait=10)
    return SimpleNamespace(
        run=run,
        ports=ports,
        snapshots=snapshots,
        texts=snapshots[-1] if snapshots else {},
        series=series,
        node_cpu=node_cpu,
        folder_gone=prom.folder is None,
        left=left,
    )


def test_the_monitored_run_trains(monitored):
    assert monitored.run.ok, monitored.run.output[-3000:]


def assert_each_rank_serves_the_training_metrics(ports, texts):
    """Rank r's last reading, on port ``ports[r]``, holds every training metric with ``rank="r"``,
    each above 0 (a histogram: its count of steps)."""
    for rank, port in enumerate(ports):
        text = texts.get(port, "")
        for name in TRAINING_METRICS:
            value = sample(text, name, rank)
            if value is None:
                value = sample(text, name + "_count", rank)
            assert (value or 0) > 0, (port, name, text[-800:])


def test_each_rank_serves_the_four_training_metrics_on_base_plus_its_rank(monitored):
    assert_each_rank_serves_the_training_metrics(monitored.ports, monitored.texts)


def test_the_fast_rank_waits_in_allreduce_for_the_slow_one(monitored):
    def at(snapshot, name, rank):
        return sample(snapshot[monitored.ports[rank]], name, rank) or 0.0

    steps = "hvdcourse_step_seconds_count"
    # the last reading before rank 1 slowed down, after the first step (which waits for the slower
    # of the two ranks to build its training function)
    before = [
        s for s in monitored.snapshots if 1 <= at(s, steps, 1) < SLOW_FROM and at(s, steps, 0)
    ]
    assert before, "no reading of the endpoints between the first step and the slowdown"
    waited = [
        at(monitored.snapshots[-1], "hvdcourse_allreduce_wait_seconds_sum", rank)
        - at(before[-1], "hvdcourse_allreduce_wait_seconds_sum", rank)
        for rank in (0, 1)
    ]
    slow_steps = at(monitored.snapshots[-1], steps, 1) - SLOW_FROM + 1
    # rank 1 starts each slow step SLOW_SECONDS late: rank 0 waits that much longer in the allreduce
    # (a loaded machine adds waits to both ranks alike)
    assert waited[0] - waited[1] > 0.5 * SLOW_SECONDS * slow_steps, (waited, slow_steps)


def test_prometheus_returns_every_training_metric_and_the_cpu_time_for_each_rank(monitored):
    frame = monitored.series
    assert len(frame), "Prometheus returned no series of the ranks"
    names = {name.removesuffix("_sum") for name in frame["__name__"]}
    assert names == {*TRAINING_METRICS, "process_cpu_seconds_total"}
    for name, per_metric in frame.groupby(frame["__name__"].str.removesuffix("_sum")):
        assert set(per_metric["rank"]) == {"0", "1"}, name


def test_prometheus_scrapes_this_machine_through_the_node_exporter(monitored):
    frame = monitored.node_cpu
    assert {"idle", "user", "system"} <= set(frame["mode"])


def test_nothing_is_left_running_afterwards(monitored):
    assert monitored.left == []
    assert monitored.folder_gone


@pytest.fixture(scope="module")
def torch_monitored(tmp_path_factory):
    """A 2-rank train_torch_hvd with --metrics-port, rank 1 slow from its first step; the ranks'
    endpoints read while it runs."""
    ports = monitoring.free_port_block(2)
    run, snapshots = run_with_slow_rank(
        "hvdcourse.examples.train_torch_hvd",
        TORCH_STEPS,
        ports,
        tmp_path_factory.mktemp("monitoring-torch"),
    )
    return SimpleNamespace(run=run, ports=ports, texts=snapshots[-1] if snapshots else {})


def test_the_pytorch_trainer_serves_the_same_metrics_on_base_plus_its_rank(torch_monitored):
    assert torch_monitored.run.ok, torch_monitored.run.output[-3000:]
    assert_each_rank_serves_the_training_metrics(torch_monitored.ports, torch_monitored.texts)


def test_the_pytorch_trainers_fast_rank_waits_in_allreduce_for_the_slow_one(torch_monitored):
    def mean_wait(rank):
        text = torch_monitored.texts.get(torch_monitored.ports[rank], "")
        name = "hvdcourse_allreduce_wait_seconds"
        return sample(text, name + "_sum", rank) / sample(text, name + "_count", rank)

    # rank 1 starts every step SLOW_SECONDS late: rank 0 waits about that much in each synchronize()
    waited = [mean_wait(rank) for rank in (0, 1)]
    assert waited[0] - waited[1] > 0.5 * SLOW_SECONDS, waited


def test_a_missing_prometheus_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingToolError) as err:
        monitoring.Prometheus()
    line = error_line(err.value)
    assert "\n" not in line
    assert "'prometheus' is not installed" in line and "apt-get install prometheus" in line


def test_the_playbook_serves_the_ranks_metrics_on_the_courses_port_base():
    defaults = os.path.join(ROOT, "ansible", "roles", "monitoring", "defaults", "main.yml")
    with open(defaults) as fh:
        assert yaml.safe_load(fh)["lab_metrics_port_base"] == monitoring.METRICS_PORT_BASE


def test_the_metrics_ports_stay_clear_of_the_exporters_and_the_hubs_ports():
    # 9100-9999 (and the first ports above it) are Prometheus' exporters' ports, 9400 NVIDIA's
    # dcgm-exporter; the hub and the Slurm lab pick theirs from 20000 up
    first = monitoring.METRICS_PORT_BASE
    assert 10200 < first and first + 256 < 20000
