"""ansible/site.yml: the course lab from one playbook, run twice against this machine.

The inventory has two hosts on a local connection, ``head`` (NFS server, the class hub, Prometheus,
2 slots) and ``node1`` (1 slot), each with its own ``lab_prefix`` in a temporary folder, so that the
playbook writes nothing outside it: the checkout (cloned from this repository's HEAD), the shared
folder, the hostfile, the configuration and service files all live there. ``make env`` runs in each
checkout against the venv running this test (a warm venv: "environment up to date"). No apt task
runs (``lab_install_packages: false``). The class hub (roles/hub: the same command as ``make hub``)
starts for a roster of one new learner account, with its home in a temporary folder, on the hub's
installation that tools/setup_hub.sh made for the session (a no-op here); it is stopped and the account
removed at the end. Needs root, as the hub does.

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
import shutil
import socket
import subprocess
import sys
import tempfile

import psutil
import pytest
import yaml

from conftest import ROOT, course_cli
from hvdcourse.course.hub import private, setup
from hvdcourse.course.hub.api import Hub

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
def lab(tmp_path_factory, hub_install):
    """The playbook run twice on one inventory; the hub it started is stopped at the end, its learner's
    account removed and the answer keys' modes put back."""
    playbook = shutil.which("ansible-playbook")
    if playbook is None:
        pytest.fail(
            "ansible-playbook not found: sudo apt-get install ansible-core (make env does as root)"
        )
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.fail("the playbook's class hub needs root and useradd (it makes learners' accounts)")
    tmp = tmp_path_factory.mktemp("lab")
    prefixes = {host: str(tmp / host) for host in SLOTS}
    homes = tempfile.mkdtemp(prefix="hvdlab-homes-")  # learners must reach their homes
    os.chmod(homes, 0o755)
    learner = f"hvdlab{os.urandom(2).hex()}"
    roster = tmp / "roster.csv"
    roster.write_text(f"username\n{learner}\n")
    # the hub closes the answer keys of the learners' kernel package: their modes are put back
    saved = private.modes(
        private.places(ROOT, (private.kernel_package(setup.Install().kernel_python()),))
    )
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
                "hub_roster": str(roster),
                "hub_port": _free_port(),
                "hub_homes": homes,
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
    state = os.path.join(prefixes["head"], "var/lib/hvdcourse/hub")
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
            "state": state,
            "learner": learner,
            "homes": homes,
        }
    finally:
        course_cli("hvdcourse.course.hub", "stop", "--state", state, timeout=180)
        try:
            pwd.getpwnam(learner)
            subprocess.run(["userdel", "-r", learner], capture_output=True, timeout=60)
        except KeyError:
            pass
        shutil.rmtree(homes, ignore_errors=True)
        private.restore(saved)


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
        host: [f"{ADDRESSES[host]}:{18400 + local_rank}" for local_rank in range(SLOTS[host])]
        for host in SLOTS
    }
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus package; without it the YAML checks above stand alone
        subprocess.run([promtool, "check", "config", path], check=True, capture_output=True)


def test_the_hub_answers_over_https_on_loopback_for_the_rosters_learner(lab):
    settings = setup.State(lab["state"]).read_settings()
    assert settings["port"] == lab["inventory"]["all"]["vars"]["hub_port"]
    assert settings["learners"] == [lab["learner"]] and settings["tls"]
    assert Hub.of(settings).version() == "6.1.1"  # through its proxy, trusting its certificate
    home = pwd.getpwnam(lab["learner"]).pw_dir
    assert home == os.path.join(lab["homes"], lab["learner"])
    assert os.listdir(os.path.join(home, "exercises")) and not os.path.exists(
        os.path.join(home, "solutions")
    )
    listening = {
        c.laddr.ip
        for c in psutil.net_connections("tcp")
        if c.status == "LISTEN" and c.laddr.port == settings["port"]
    }
    assert listening == {"127.0.0.1"}


def test_stopping_the_hub_ends_its_processes(lab):
    settings = setup.State(lab["state"]).read_settings()
    proc = course_cli("hvdcourse.course.hub", "stop", "--state", lab["state"], timeout=180)
    assert proc.returncode == 0 and "no process of the hub is left" in proc.stdout, proc.stdout
    assert Hub.of(settings).version() is None
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", settings["port"])) != 0
