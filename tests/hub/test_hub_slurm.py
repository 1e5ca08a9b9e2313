"""The class hub with ``--spawner slurm``: a learner's server as a Slurm job of the course's
one-machine cluster (batchspawner's SlurmSpawner), reached through the hub's proxy, and gone with
its job when the hub stops. A cluster of its own (its own folder and ports) and as many learners as
its CPUs hold: two, each node declaring one CPU and each server job asking for one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from conftest import ROOT
from hvdcourse.course.hub import private, setup
from hvdcourse.course.hub.api import Hub


def hub_cli(*argv, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hvdcourse.course.hub", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


@pytest.fixture(scope="module")
def slurm_hub(hub_install):
    from hvdcourse.course.services.slurm_cluster import LocalCluster

    base = tempfile.mkdtemp(prefix="hvdhubs-")
    os.chmod(base, 0o755)
    homes, state = os.path.join(base, "homes"), os.path.join(base, "state")
    os.makedirs(homes, mode=0o755)
    tag = os.urandom(2).hex()
    names = [f"hvdhubs{tag}a", f"hvdhubs{tag}b"]
    roster = os.path.join(base, "roster.csv")
    with open(roster, "w") as fh:
        fh.write("username\n" + "".join(f"{n}\n" for n in names))
    cluster = LocalCluster(os.path.join(base, "slurm"))
    # hub start closes the answer keys in this clone: their modes are put back afterwards (a later
    # test, or a grader run as another user, reads them)
    kernel_package = private.kernel_package(setup.Install().kernel_python())
    saved = private.modes(private.places(ROOT, (kernel_package,)))
    try:
        cluster.start(timeout=60)
        env = cluster.env()
        proc = hub_cli(
            "start",
            "--roster",
            roster,
            "--state",
            state,
            "--homes",
            homes,
            "--port",
            str(setup.free_port()),
            "--spawner",
            "slurm",
            "--slurm-node-address",
            "127.0.0.1",
            "--no-slurm-mem",  # the local cluster's nodes declare no memory
            env=env,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        settings = setup.State(state).read_settings()
        api = Hub.of(settings)
        yield {"names": names, "api": api, "state": state, "cluster": cluster, "env": env}
    finally:
        hub_cli("stop", "--state", state)
        cluster.stop(quiet=True, remove=True)
        for name in names:
            subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
        private.restore(saved)


def test_each_learners_server_runs_as_a_slurm_job_on_its_own_node_and_goes_with_the_hub(slurm_hub):
    api, names, env = slurm_hub["api"], slurm_hub["names"], slurm_hub["env"]
    began = time.monotonic()
    for name in names:
        api.start(name)
    api.wait_ready(names, timeout=180)
    print(f"{len(names)} servers ready as Slurm jobs in {time.monotonic() - began:.1f} s")
    for name in names:
        status, body = api.call("GET", f"/user/{name}/api/status")
        assert status == 200 and "kernels" in body, (name, status, body)
    jobs = subprocess.run(
        ["squeue", "-h", "-o", "%u %T %j %N"], capture_output=True, text=True, env=env, timeout=30
    ).stdout.split("\n")
    jobs = sorted(line.split() for line in jobs if line.strip())
    assert [(j[0], j[1]) for j in jobs] == [(n, "RUNNING") for n in names], jobs
    assert all(j[2].startswith("spawner-jupyterhub") for j in jobs), jobs
    assert len({j[3] for j in jobs}) == 2, f"both servers on one node of one CPU: {jobs}"
    uids = {pwd.getpwnam(n).pw_uid for n in names}
    servers = {
        p.info["uids"].real
        for p in psutil.process_iter(["uids", "cmdline"])
        if p.info["uids"].real in uids and "jupyterhub-singleuser" in " ".join(p.info["cmdline"])
    }
    assert servers == uids, "a learner has no jupyterhub-singleuser process of their own"
    proc = hub_cli("stop", "--state", slurm_hub["state"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    queue = subprocess.run(
        ["squeue", "-h"], capture_output=True, text=True, env=env, timeout=30
    ).stdout
    assert queue.strip() == ""
    deadline = time.monotonic() + 20  # slurmd ends the job's processes a moment after scancel
    while time.monotonic() < deadline and any(
        p.uids().real in uids for p in psutil.process_iter() if p.is_running()
    ):
        time.sleep(0.5)
    assert not [p.cmdline() for p in psutil.process_iter() if p.uids().real in uids]
