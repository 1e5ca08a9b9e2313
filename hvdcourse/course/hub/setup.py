"""Where the class hub lives and the files it runs from (lesson: Instructor guide).

Two places:

- the installation, ``/opt/hvdcourse-hub`` (``$HVDCOURSE_HUB_PREFIX``), made by
  ``tools/setup_hub.sh`` and readable by every account: the hub's venv (``hub/``, from Debian's
  ``/usr/bin/python3``, since a learner's server runs its ``jupyterhub-singleuser``), the proxy
  (``proxy/``), the file ``kernel-python`` naming the interpreter of the course's kernel (one that
  learners' accounts can run), and ``share/jupyter`` with that kernel's spec and the lab's settings;
- the hub's state, ``_build/hub`` in the clone (``--state``), mode 700, root's only: the settings,
  ``jupyterhub_config.py``, the database, the cookie secret, the service token, the log, and the
  learners' first passwords.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess

from hvdcourse.runtime.errors import MissingToolError, UsageError
from hvdcourse.runtime.mpienv import launch_env
from hvdcourse.runtime.paths import BUILD, ROOT

PREFIX = os.environ.get("HVDCOURSE_HUB_PREFIX", "/opt/hvdcourse-hub")
STATE = os.path.join(BUILD, "hub")
MARKER = "HVDCOURSE_HUB"  # every process of one hub carries MARKER=<its id> in its environment
SETUP_HINT = "run 'make hub' (tools/setup_hub.sh installs it; as root)"
# the lab's settings for every learner: a double-click on a lesson (.md) opens it as a notebook
VIEWER_OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {
        "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}
    }
}


class Install:
    """The paths of the hub's installation under ``prefix``."""

    def __init__(self, prefix: str = PREFIX):
        self.prefix = os.path.abspath(prefix)
        self.hub_venv = os.path.join(self.prefix, "hub")
        self.jupyterhub = os.path.join(self.hub_venv, "bin", "jupyterhub")
        self.proxy = os.path.join(
            self.prefix, "proxy", "node_modules", ".bin", "configurable-http-proxy"
        )
        self.kernel_file = os.path.join(self.prefix, "kernel-python")
        self.share = os.path.join(self.prefix, "share", "jupyter")

    def kernel_python(self) -> str:
        """The interpreter of the learners' kernel (what tools/setup_hub.sh found or built)."""
        try:
            with open(self.kernel_file) as fh:
                return fh.read().strip()
        except OSError:
            raise MissingToolError(
                f"the learners' kernel is not set up ({self.kernel_file} is missing): {SETUP_HINT}"
            ) from None

    def check(self, kernel: bool = True) -> None:
        """:class:`MissingToolError` naming the first missing piece."""
        for path, what in ((self.jupyterhub, "JupyterHub"), (self.proxy, "the proxy")):
            if not os.access(path, os.X_OK):
                raise MissingToolError(f"{what} is not installed ({path} is missing): {SETUP_HINT}")
        if kernel:
            python = self.kernel_python()
            blocked = blocked_for_others(python)
            if blocked:
                raise UsageError(
                    f"the learners' kernel {python} cannot be run by their accounts ({blocked} is "
                    "closed to other users); rerun tools/setup_hub.sh, which builds one from "
                    "/usr/bin/python3"
                )


def blocked_for_others(path: str) -> str:
    """The first folder or file on the way to ``path`` (links followed) that an account other than
    its owner cannot pass or run, or '' when every account can run it."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for i in range(2, len(parts) + 1):
        step = os.sep.join(parts[:i]) or os.sep
        try:
            mode = os.stat(step).st_mode
        except OSError:
            return step
        if not mode & 0o001:
            return step
    return ""


def free_port(ip: str = "127.0.0.1") -> int:
    """A free port below Linux's ephemeral range (32768-60999), where other programs' random ports
    (ZeroMQ's, the kernel's own picks) rarely land between this choice and the hub's bind."""
    for _ in range(100):
        port = 20000 + secrets.randbelow(12000)
        with socket.socket() as sock:
            try:
                sock.bind((ip, port))
            except OSError:
                continue
            return port
    raise UsageError("no free port found between 20000 and 32000 on this machine")


def check_port(port: int, ip: str) -> int:
    """``port`` if it is free on ``ip``, else :class:`UsageError`."""
    if not 0 < port < 65536:
        raise UsageError(f"--port {port}: a port is a number from 1 to 65535")
    with socket.socket() as sock:
        # as the proxy binds: a port whose last connections are in TIME_WAIT (just after
        # make hub-stop) is free to it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as err:
            raise UsageError(
                f"port {port} on {ip} is in use ({err.strerror}): stop what uses it, or pick "
                "another with --port"
            ) from None
    return port


class State:
    """The files of one hub's state folder (created mode 700)."""

    def __init__(self, folder: str = STATE):
        self.folder = os.path.abspath(folder)
        self.settings = os.path.join(self.folder, "hub.json")
        self.config = os.path.join(self.folder, "jupyterhub_config.py")
        self.log = os.path.join(self.folder, "jupyterhub.log")
        self.pid = os.path.join(self.folder, "hub.pid")
        self.passwords = os.path.join(self.folder, "passwords.csv")
        self.token = os.path.join(self.folder, "service-token")
        self.cert = os.path.join(self.folder, "tls", "hub.crt")
        self.key = os.path.join(self.folder, "tls", "hub.key")

    def make(self) -> None:
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        os.chmod(self.folder, 0o700)

    def read_settings(self) -> dict | None:
        try:
            with open(self.settings, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None


def tls_files(state: State, cert: str = "", key: str = "") -> dict:
    """``{'cert': ..., 'key': ...}`` the hub serves HTTPS with: the instructor's pair when given
    (checked readable), else a self-signed certificate for ``localhost`` and ``127.0.0.1`` made once
    with openssl in the state folder and kept across restarts (learners' browsers accept it once)."""
    if cert or key:
        if not (cert and key):
            raise UsageError("give both --tls-cert and --tls-key (or neither: a self-signed pair)")
        for path, what in ((cert, "--tls-cert"), (key, "--tls-key")):
            if not os.path.isfile(path):
                raise UsageError(f"{what} {path}: no such file")
        return {"cert": os.path.abspath(cert), "key": os.path.abspath(key), "self_signed": False}
    if not (os.path.isfile(state.cert) and os.path.isfile(state.key)):
        openssl = shutil.which("openssl")
        if not openssl:
            raise MissingToolError(
                "openssl is not installed (it makes the hub's self-signed certificate): "
                "apt-get install openssl, or give --tls-cert and --tls-key"
            )
        os.makedirs(os.path.dirname(state.cert), mode=0o700, exist_ok=True)
        proc = subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "825"]
            + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
            + ["-keyout", state.key, "-out", state.cert],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise MissingToolError(
                f"openssl could not make the hub's certificate: {proc.stderr.strip()[-300:]}"
            )
        os.chmod(state.key, 0o600)
    return {"cert": state.cert, "key": state.key, "self_signed": True}


def _write(path: str, text: str, mode: int = 0o600) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def kernel_spec(python: str, cache: str) -> dict:
    """The course's kernel for learners: their reachable interpreter, with the course's settings
    (the ``%%px`` lessons' MPI defaults, tf.keras as Keras 2, the offline MNIST in ``cache``)."""
    env = launch_env({"TF_CPP_MIN_LOG_LEVEL": "3"}, base={})
    env.pop("OMPI_ALLOW_RUN_AS_ROOT", None)  # learners are not root
    env.pop("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", None)
    env["HVDCOURSE_CACHE"] = cache  # filled by tools/setup_hub.sh, readable by every account
    return {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3",  # the lessons' headers name the kernel python3
        "language": "python",
        "env": env,
        "metadata": {"debugger": True},
    }


def write_settings(state: State, settings: dict) -> None:
    """The hub's settings file, ``hub.json`` (root only)."""
    _write(state.settings, json.dumps(settings, indent=1, sort_keys=True) + "\n")


def write_files(install: Install, state: State, settings: dict) -> None:
    """The settings, ``jupyterhub_config.py``, the kernel spec and the lab's settings."""
    state.make()
    write_settings(state, settings)
    _write(state.token, settings["service_token"] + "\n")  # the instructor's scripts read it
    _write(
        state.config,
        "# Written by python -m hvdcourse.course.hub (make hub): edit hub.json or rerun make hub.\n"
        "import sys\n\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from hvdcourse.course.hub.hubconfig import apply  # noqa: E402\n\n"
        f"apply(get_config(), {state.settings!r})  # noqa: F821\n",
    )
    spec = kernel_spec(settings["kernel_python"], os.path.join(install.prefix, "cache"))
    for path, content in (
        (os.path.join(install.share, "kernels", "python3", "kernel.json"), spec),
        (
            os.path.join(install.hub_venv, "share", "jupyter", "lab", "settings", "overrides.json"),
            VIEWER_OVERRIDES,
        ),
    ):
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        _write(path, json.dumps(content, indent=1) + "\n", mode=0o644)


def new_settings(install: Install, state: State, **options) -> dict:
    """The settings of a new hub: ``options`` plus its ports, tokens and marker."""
    previous = state.read_settings() or {}
    return {
        **options,
        "prefix": install.prefix,
        "hub_venv": install.hub_venv,
        "proxy": install.proxy,
        "kernel_python": install.kernel_python(),
        "state": state.folder,
        "hub_port": free_port(),
        "proxy_api_port": free_port(),
        # kept across restarts: the instructor's scripts keep working
        "service_token": previous.get("service_token") or secrets.token_hex(32),
        "marker": MARKER,
        "marker_value": secrets.token_hex(8),
    }
