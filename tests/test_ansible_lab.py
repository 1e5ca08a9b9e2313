"""ansible/site.yml: the course lab from one playbook, run twice against this machine.

The inventory has two hosts on a local connection, ``head`` (NFS server, JupyterLab, Prometheus,
2 slots) and ``node1`` (1 slot), each with its own ``lab_prefix`` in a temporary folder, so that the
playbook writes nothing outside it: the checkout (cloned from this repository's HEAD), the shared
folder, the hostfile, the configuration and service files all live there. ``make env`` runs in each
checkout against the venv running this test (a warm venv: "environment up to date"). No apt task
runs (``lab_install_packages: false``) and the lab is started without systemd (``supervised``).

What is not exercised here: the NFS mount. In the prefix the exports file and fstab are not the
ones the NFS server and mount(8) read, and this sandbox's kernel has no NFS at all (no nfs/nfsd in
/proc/filesystems, no modules; evidence in ansible/README.md). The tests check the exports and fstab
entries and that the playbook says plainly that it did not mount.
"""

from __future__ import annotations

import getpass
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import psutil
import pytest
import yaml

from conftest import ROOT

PLAYBOOK_DIR = os.path.join(ROOT, "ansible")
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE
)
SLOTS = {"head": 2, "node1": 1}
ADDRESSES = {"head": "127.0.0.1", "node1": "127.0.0.2"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _recap(output: str) -> dict:
    """{host: {"ok": n, "changed": n, "unreachable": n, "failed": n}} from a PLAY RECAP."""
    return {
        m[0]: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m[1:])))
        for m in RECAP.findall(output)
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The playbook run twice on one inventory; the lab it started is stopped at the end."""
    playbook = shutil.which("ansible-playbook")
    if playbook is None:
        pytest.fail(
            "ansible-playbook not found: sudo apt-get install ansible-core (make env does as root)"
        )
    tmp = tmp_path_factory.mktemp("lab")
    prefixes = {host: str(tmp / host) for host in SLOTS}
    (tmp / "home").mkdir()
    commit = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    hostvars = {
        host: {
            "lab_prefix": prefixes[host],
            "lab_address": ADDRESSES[host],
            "lab_slots": SLOTS[host],
        }
        for host in SLOTS
    }
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_become": False,
                "lab_install_packages": False,
                "lab_service_manager": "supervised",
                "lab_course_repo": ROOT,
                "lab_course_version": commit,
                "lab_venv": sys.prefix,
                "lab_monitoring": True,
                "lab_user": getpass.getuser(),
                "jupyterlab_port": _free_port(),
                "jupyterlab_token": secrets.token_hex(16),
                "jupyterlab_home": str(tmp / "home"),
            },
            "children": {
                "lab_nfs_server": {"hosts": {"head": hostvars["head"]}},
                "lab_nodes": {"hosts": {"head": None, "node1": hostvars["node1"]}},
            },
        }
    }
    inventory_file = tmp / "inventory.yml"
    inventory_file.write_text(yaml.safe_dump(inventory))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=os.path.join(PLAYBOOK_DIR, "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
    )
    command = [playbook, "-i", str(inventory_file), "-c", "local", "site.yml"]
    control = os.path.join(prefixes["head"], "usr/local/sbin/hvdcourse-lab")
    runs = []
    try:
        for number in (1, 2):
            log = tmp / f"run{number}.log"  # kept for a failure's diagnosis
            with open(log, "w") as out:
                done = subprocess.run(
                    command,
                    cwd=PLAYBOOK_DIR,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=600,
                )
            runs.append(log.read_text())
            assert done.returncode == 0, f"ansible-playbook failed ({log}):\n{runs[-1][-4000:]}"
        yield {
            "runs": runs,
            "inventory": inventory,
            "inventory_file": str(inventory_file),
            "prefixes": prefixes,
            "control": control,
            "pidfile": os.path.join(prefixes["head"], "var/lib/hvdcourse/hvdcourse-lab.pid"),
        }
    finally:
        if os.path.exists(control):
            subprocess.run([control, "stop"], timeout=60, check=False)


def _config_lines(path: str) -> list:
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_first_run_configures_both_hosts(lab):
    recap = _recap(lab["runs"][0])
    assert set(recap) == {"head", "node1"}
    for host, counts in recap.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, (host, counts)
        assert counts["changed"] > 0, (host, counts)


def test_second_run_changes_nothing(lab):
    recap = _recap(lab["runs"][1])
    assert set(recap) == {"head", "node1"}
    for host, counts in recap.items():
        assert (counts["changed"], counts["unreachable"], counts["failed"]) == (0, 0, 0), (
            host,
            counts,
        )


def test_every_node_gets_the_hostfile_of_the_inventory(lab):
    listing = subprocess.run(
        ["ansible-inventory", "-i", lab["inventory_file"], "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    inventory = json.loads(listing)
    hostvars = inventory["_meta"]["hostvars"]
    expected = [
        f"{hostvars[host]['lab_address']} slots={hostvars[host]['lab_slots']}"
        for host in inventory["lab_nodes"]["hosts"]
    ]
    assert expected == ["127.0.0.1 slots=2", "127.0.0.2 slots=1"]
    for prefix in lab["prefixes"].values():
        assert _config_lines(os.path.join(prefix, "etc/hvdcourse/hostfile")) == expected


def test_every_node_accepts_the_head_nodes_ssh_key(lab):
    home = pwd.getpwnam(getpass.getuser()).pw_dir.lstrip("/")
    ssh = {host: os.path.join(prefix, home, ".ssh") for host, prefix in lab["prefixes"].items()}
    with open(os.path.join(ssh["head"], "id_ed25519.pub")) as f:
        key = f.read().strip()
    for folder in ssh.values():
        assert _config_lines(os.path.join(folder, "authorized_keys")) == [key]
    config = _config_lines(os.path.join(ssh["head"], "config"))
    assert config == ["Host 127.0.0.1 127.0.0.2", "StrictHostKeyChecking accept-new"]


def test_nfs_server_exports_the_shared_folder_to_the_other_nodes(lab):
    shared = os.path.join(lab["prefixes"]["head"], "srv/hvdcourse")
    exports = _config_lines(
        os.path.join(lab["prefixes"]["head"], "etc/exports.d/hvdcourse.exports")
    )
    assert exports == [f"{shared} 127.0.0.2(rw,sync,no_subtree_check)"]
    assert os.path.isdir(shared)


def test_nfs_client_has_the_fstab_entry_and_says_it_did_not_mount(lab):
    server_dir = os.path.join(lab["prefixes"]["head"], "srv/hvdcourse")
    mount_point = os.path.join(lab["prefixes"]["node1"], "srv/hvdcourse")
    fstab = _config_lines(os.path.join(lab["prefixes"]["node1"], "etc/fstab"))
    assert fstab == [f"127.0.0.1:{server_dir} {mount_point} nfs defaults,_netdev,nofail 0 0"]
    assert os.path.isdir(mount_point) and not os.path.ismount(mount_point)
    for run in lab["runs"]:
        assert "NFS server NOT started:" in run and "NFS mount NOT done:" in run
        assert "the fstab entry lies under lab_prefix" in run


def test_prometheus_scrapes_every_node_exporter_and_rank_port(lab):
    path = os.path.join(lab["prefixes"]["head"], "etc/prometheus/prometheus.yml")
    with open(path) as f:
        config = yaml.safe_load(f)
    jobs = {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}
    nodes = {group["labels"]["node"]: group["targets"] for group in jobs["node"]}
    ranks = {group["labels"]["node"]: group["targets"] for group in jobs["hvdcourse"]}
    assert nodes == {host: [f"{ADDRESSES[host]}:9100"] for host in SLOTS}
    assert ranks == {
        host: [f"{ADDRESSES[host]}:{9400 + local_rank}" for local_rank in range(SLOTS[host])]
        for host in SLOTS
    }
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus package; without it the YAML checks above stand alone
        subprocess.run([promtool, "check", "config", path], check=True, capture_output=True)


def test_systemd_unit_starts_jupyter_lab_with_the_generated_config(lab):
    head = lab["prefixes"]["head"]
    unit = _config_lines(os.path.join(head, "etc/systemd/system/hvdcourse-lab.service"))
    config = os.path.join(head, "etc/hvdcourse/jupyter_lab_config.py")
    assert f"ExecStart={sys.prefix}/bin/jupyter lab --config={config}" in unit
    assert f"User={getpass.getuser()}" in unit and "Restart=on-failure" in unit


def test_jupyterlab_answers_with_the_token_only(lab):
    settings = lab["inventory"]["all"]["vars"]
    url = f"http://127.0.0.1:{settings['jupyterlab_port']}/api/status"
    request = urllib.request.Request(
        url, headers={"Authorization": f"token {settings['jupyterlab_token']}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200 and "started" in json.load(response)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=30)
    assert refused.value.code == 403


def test_stopping_the_lab_ends_its_processes(lab):
    with open(lab["pidfile"]) as f:
        loop = psutil.Process(int(f.read()))
    processes = [loop, *loop.children(recursive=True)]
    assert any("jupyter" in " ".join(p.cmdline()) for p in processes)
    subprocess.run([lab["control"], "stop"], timeout=60, check=True)
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert alive == []
    assert subprocess.run([lab["control"], "status"]).returncode != 0
    port = lab["inventory"]["all"]["vars"]["jupyterlab_port"]
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"
