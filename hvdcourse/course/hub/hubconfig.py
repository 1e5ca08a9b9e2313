"""JupyterHub's configuration for the class hub, made from the settings file that
:mod:`hvdcourse.course.hub.setup` writes (lesson: Instructor guide).

The ``jupyterhub_config.py`` in the hub's state folder is three lines: it puts the course on
``sys.path`` and calls :func:`apply` with the hub's ``get_config()`` object and the settings file, so
the whole configuration lives here, in one module that the tests read, and the settings (ports,
roster, limits, spawner) in plain JSON. Runs in the hub's Python: no import of the course's
heavier modules.
"""

from __future__ import annotations

import json
import os
import shutil

SLURM = "batchspawner.SlurmSpawner"
LOCAL = "hvdcourse.course.hub.spawner.LimitedSpawner"


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def activity_interval(s: dict) -> int:
    """Seconds between two reports of a server's activity to the hub (its own, and the proxy's):
    well under the idle timeout, so that the culler never takes a server in use for an idle one."""
    return min(300, max(5, int(s["idle_timeout"]) // 3))


def spawner_environment(s: dict) -> dict:
    """What every learner's server (and its kernels and terminals) finds in its environment."""
    return {
        # the course's kernel venv first: `python`, `horovodrun` in a terminal are the course's
        "PATH": os.pathsep.join(
            [os.path.dirname(s["kernel_python"]), os.path.join(s["hub_venv"], "bin")]
            + ["/usr/local/bin", "/usr/bin", "/bin"]
        ),
        # the course's kernel spec and the lab's settings (lessons open as notebooks)
        "JUPYTER_PATH": os.path.join(s["prefix"], "share", "jupyter"),
        s["marker"]: s["marker_value"],  # finds every process of this hub again (stop)
        "JUPYTERHUB_ACTIVITY_INTERVAL": str(activity_interval(s)),
        # (slurm) the cluster that sbatch, squeue and scancel talk to, when not the system's
        **({"SLURM_CONF": s["slurm"]["conf"]} if s.get("slurm", {}).get("conf") else {}),
    }


def apply(c, settings_path: str) -> None:
    """Set the hub's configuration ``c`` from the settings file at ``settings_path``."""
    s = load(settings_path)
    state = s["state"]
    hub = c.JupyterHub
    hub.ip = s["ip"]
    hub.port = s["port"]
    hub.hub_ip = "127.0.0.1"
    hub.hub_port = s["hub_port"]
    hub.db_url = "sqlite:///" + os.path.join(state, "jupyterhub.sqlite")
    hub.cookie_secret_file = os.path.join(state, "jupyterhub_cookie_secret")
    hub.pid_file = os.path.join(state, "jupyterhub.pid")
    hub.cleanup_servers = True  # stopping the hub stops every learner's server
    hub.cleanup_proxy = True
    hub.shutdown_on_logout = False
    hub.last_activity_interval = activity_interval(s)
    hub.concurrent_spawn_limit = max(10, len(s["learners"]))
    if s.get(
        "tls"
    ):  # the proxy, the learners' entrance, serves HTTPS; inside, plain HTTP on loopback
        hub.ssl_cert = s["tls"]["cert"]
        hub.ssl_key = s["tls"]["key"]
    c.ConfigurableHTTPProxy.command = [s["proxy"]]
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s['proxy_api_port']}"
    c.ConfigurableHTTPProxy.pid_file = os.path.join(state, "proxy.pid")
    c.ConfigurableHTTPProxy.debug = False

    # who may log in: the roster's accounts, with their Unix password (PAM)
    c.Authenticator.allowed_users = set(s["learners"])
    c.Authenticator.admin_users = set(s["admins"])
    c.PAMAuthenticator.open_sessions = False  # no pam_systemd / utmp session on a class machine

    # the instructor's (and the tests') service, and the idle culler
    hub.services = [
        {"name": "hvdcourse", "api_token": s["service_token"]},
        {
            "name": "idle-culler",
            "command": [
                os.path.join(s["hub_venv"], "bin", "python3"),
                "-m",
                "jupyterhub_idle_culler",
                f"--timeout={s['idle_timeout']}",
                f"--cull-every={max(5, s['idle_timeout'] // 4)}",
            ],
            "environment": {s["marker"]: s["marker_value"]},
        },
    ]
    hub.load_roles = [
        {
            "name": "hvdcourse-instructor",
            "scopes": ["admin:servers", "admin:users", "list:users", "access:servers"],
            "services": ["hvdcourse"],
        },
        {
            "name": "idle-culler",
            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
            "services": ["idle-culler"],
        },
    ]

    spawner = c.Spawner
    spawner.default_url = "/lab"
    spawner.notebook_dir = "~"
    spawner.cmd = [os.path.join(s["hub_venv"], "bin", "jupyterhub-singleuser")]
    spawner.env_keep = ["LANG", "LC_ALL"]
    spawner.environment = spawner_environment(s)
    spawner.mem_limit = s["limits"]["memory"]
    spawner.cpu_limit = float(s["limits"]["cpus"])
    # a class asking for its servers at once on a small machine: 30 at once on 2 busy cores took
    # more than 90 s each to answer (JupyterLab's imports), JupyterHub's default gave up on them
    spawner.start_timeout = 300
    spawner.http_timeout = 300
    if s["spawner"] == "slurm":
        hub.spawner_class = SLURM
        slurm = c.SlurmSpawner
        # the hub is root: runuser (util-linux) instead of sudo; the servers' PATH has no /usr/sbin
        runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
        slurm.exec_prefix = runuser + " -u {username} --"
        slurm.batchspawner_singleuser_cmd = os.path.join(
            s["hub_venv"], "bin", "batchspawner-singleuser"
        )
        slurm.req_partition = s["slurm"].get("partition", "")
        slurm.req_runtime = s["slurm"].get("runtime", "4:00:00")
        if s["slurm"].get("ask_memory", True):  # (nodes that declare no RealMemory accept none)
            slurm.req_memory = f"{max(1, s['limits']['memory'] // 2**20)}M"
        slurm.req_nprocs = str(max(1, int(float(s["limits"]["cpus"]))))
        address = s["slurm"].get("node_address", "")
        if address:  # Slurm's node names are not host names (the course's one-machine cluster)
            slurm.state_exechost_exp = address
            slurm.ip = address
        # the servers on the nodes call the hub's API: on a real cluster it must listen where the
        # nodes reach it (the proxy, the learners' entrance, stays on 127.0.0.1)
        hub.hub_ip = hub.hub_connect_ip = s["slurm"].get("hub_address") or "127.0.0.1"
    else:
        hub.spawner_class = LOCAL
        c.LimitedSpawner.procs_limit = s["limits"]["procs"]
        # a server without a terminal ignores SIGINT for 10 s (it asks for a confirmation): SIGTERM sooner
        c.LimitedSpawner.interrupt_timeout = 2
        c.LimitedSpawner.cgroups = s["cgroups"]
