"""The local 2-node Slurm cluster (hvdcourse.course.services.slurm_cluster): start, idempotent start, clean stop, errors."""

import os
import subprocess
import tempfile
import time

import pytest

from conftest import PYTHON, ROOT
from hvdcourse.course.services.slurm_cluster import ClusterError, LocalCluster


@pytest.fixture
def cluster():
    """A cluster of its own (not the one tests/slurm/test_slurm_jobs.py uses), always stopped and
    removed."""
    directory = tempfile.mkdtemp(prefix="hvdcourse-slurm-", dir="/tmp")
    cluster = LocalCluster(directory)
    yield cluster
    cluster.stop(quiet=True, remove=True)


def tasks(cluster):
    """Pids of the job tasks ('sleep') among the cluster's processes."""
    return [p.pid for p in cluster.processes() if p.name() == "sleep"]


def pgrep(pattern):
    proc = subprocess.run(["pgrep", "-a", "-f", pattern], capture_output=True, text=True)
    return proc.stdout.strip()


def test_run_on_nodes_without_a_tool_says_what_to_install(cluster, tmp_path, monkeypatch):
    from hvdcourse.course.services import slurm_cluster
    from hvdcourse.runtime.errors import MissingToolError

    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda name: None)
    with pytest.raises(
        MissingToolError, match=r"'numactl' is not installed.*apt-get install numactl"
    ):
        cluster.run_on_nodes(["numactl -H"], cwd=str(tmp_path))


@pytest.mark.timeout(120)
def test_start_brings_up_two_idle_nodes(cluster):
    cluster.start(timeout=60)
    assert cluster.node_states() == {"node1": "idle", "node2": "idle"}
    assert sorted(cluster.daemon_pids()) == ["munged", "slurmctld", "slurmd-node1", "slurmd-node2"]


@pytest.mark.timeout(120)
def test_second_start_keeps_the_running_daemons(cluster):
    cluster.start(timeout=60)
    first = cluster.daemon_pids()
    cluster.start(timeout=60)
    assert cluster.daemon_pids() == first


@pytest.mark.timeout(120)
def test_stop_leaves_no_process_behind_even_with_a_running_job(cluster, tmp_path):
    cluster.start(timeout=60)
    job = cluster.command(
        ["sbatch", "--parsable", "--nodes=2", "--output=sleep.out", "--wrap", "srun sleep 300"],
        cwd=str(tmp_path),
    ).stdout.strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(tasks(cluster)) < 2:
        time.sleep(0.5)
    assert cluster.job_info(int(job))["JobState"] == "RUNNING"
    running_tasks = tasks(cluster)
    assert len(running_tasks) == 2  # one 'sleep 300' per node, children of the cluster's slurmstepd
    stopped = cluster.stop()
    # daemons, slurmstepd, tasks
    assert set(running_tasks) <= set(stopped) and len(stopped) >= 4 + 2 + 2
    assert pgrep(cluster.dir) == ""
    assert all(
        not os.path.exists(f"/proc/{pid}/cmdline") or open(f"/proc/{pid}/cmdline").read() == ""
        for pid in stopped
    )  # gone, or a zombie waiting for init


@pytest.mark.timeout(120)
def test_start_that_times_out_says_why_and_cleans_up(cluster):
    with pytest.raises(ClusterError) as err:
        cluster.start(timeout=0)
    assert "not idle after 0 s" in str(err.value)
    assert "slurmctld.log (last lines)" in str(err.value)
    assert pgrep(cluster.dir) == ""


@pytest.mark.timeout(120)
def test_start_and_stop_commands_work_from_the_shell(cluster):
    # as `make cluster-start` runs it
    env = dict(os.environ, VENV=os.path.dirname(os.path.dirname(PYTHON)))
    start = subprocess.run(
        [os.path.join(ROOT, "tools", "local_cluster_start.sh"), "--dir", cluster.dir],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert start.returncode == 0, start.stderr
    assert "up, nodes {'node1': 'idle', 'node2': 'idle'}" in start.stdout
    stop = subprocess.run(
        [os.path.join(ROOT, "tools", "local_cluster_stop.sh"), "--dir", cluster.dir],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert stop.returncode == 0, stop.stderr
    assert pgrep(cluster.dir) == ""
