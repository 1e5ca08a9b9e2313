"""JupyterLab for learners: ``make lab`` (``python -m hvdcourse.course.services.lab``) opens the course live.

What it does, in order:

1. checks that JupyterLab and jupytext are installed in this Python (the course's venv);
2. takes the port given with ``--port`` (one line of error if it is in use) or a free one, and the
   token given with ``--token`` (or ``$JUPYTER_TOKEN``) or a random one;
3. writes the lab's settings under ``_build/lab/`` (in the clone, never in the user's home):
   a kernel spec ``python3`` for THIS Python, found first through ``JUPYTER_PATH`` (so a ``python3``
   kernel of another Python in ``~/.local/share/jupyter`` does not shadow it; the lessons name
   ``python3`` in their headers), and a settings override that opens ``.md`` files with jupytext's
   "Jupytext Notebook" viewer, so a double-click on a lesson opens it as a notebook;
4. starts ``jupyter lab --no-browser`` in the clone with the course's environment (the book's:
   ``TF_USE_LEGACY_KERAS=1``, the clone on ``PYTHONPATH``, the MPI defaults of
   :func:`hvdcourse.runtime.mpienv.launch_env`, so ``%%px`` lessons start their MPI engines with
   :func:`hvdcourse.runtime.engines.start_engines` exactly as when the book is built);
5. prints the URL (with the token) and waits; Ctrl-C (or SIGTERM, or the end of this process) asks
   the server to shut down, which ends the kernels, whose exit stops their engines; whatever is still
   running then (found by a marker in the environment that every process it started inherits, with
   :mod:`hvdcourse.runtime.processes`) is ended too.

The token goes to the server through the environment, not its command line (which ``ps`` shows).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import MissingToolError, RunFailed, UsageError, run_cli
from hvdcourse.runtime.mpienv import launch_env
from hvdcourse.runtime.paths import BUILD, ROOT

STATE = os.path.join(BUILD, "lab")
MARKER = "HVDCOURSE_LAB"  # every process of one lab carries MARKER=<its id> in its environment
START_TIMEOUT = 90  # seconds for the server to answer
STOP_TIMEOUT = 30  # seconds for the server to shut its kernels down before it is killed
# Open Markdown files (the lessons are MyST notebooks) with jupytext's notebook view on double-click.
VIEWER_OVERRIDES = {
    "@jupyterlab/docmanager-extension:plugin": {
        "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}
    }
}


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: stop like Ctrl-C."""


def check_installed() -> None:
    """Raise :class:`MissingToolError` if JupyterLab or jupytext is missing from this Python."""
    for module, why in (
        ("jupyterlab", "JupyterLab"),
        ("jupytext", "jupytext (lessons as notebooks)"),
    ):
        if importlib.util.find_spec(module) is None:
            raise MissingToolError(
                f"{why} is not installed in {sys.executable}: run 'make env' "
                "(or 'pip install -r requirements.txt' in the course's venv), then 'make lab' again"
            )


def choose_port(port: int | None, ip: str = "127.0.0.1") -> int:
    """``port`` if it is free on ``ip`` (else :class:`UsageError`), or a free port when ``None``."""
    with socket.socket() as sock:
        try:
            sock.bind((ip, port or 0))
        except OSError as err:
            raise UsageError(
                f"port {port} on {ip} is in use ({err.strerror}): pick another with --port, "
                "or leave --port out to take a free one"
            ) from None
        return sock.getsockname()[1]


def lab_env(marker: str, base: dict | None = None) -> dict:
    """The server's environment (kernels and engines inherit it): the book's, plus the lab's settings."""
    base = dict(os.environ if base is None else base)
    pythonpath = [ROOT] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p]
    jupyter_path = [os.path.join(STATE, "jupyter")] + [
        p for p in base.get("JUPYTER_PATH", "").split(os.pathsep) if p
    ]
    return launch_env(
        {
            MARKER: marker,
            "PYTHONPATH": os.pathsep.join(dict.fromkeys(pythonpath)),
            "JUPYTER_PATH": os.pathsep.join(dict.fromkeys(jupyter_path)),
            # as the book build: TensorFlow logs "failed call to cuInit" as an error on every CPU machine
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        },
        base=base,
    )


def write_settings(env: dict) -> dict:
    """Write the kernel spec and the viewer override under ``_build/lab``; return their paths."""
    kernel_dir = os.path.join(STATE, "jupyter", "kernels", "python3")
    settings_dir = os.path.join(STATE, "settings")
    os.makedirs(kernel_dir, exist_ok=True)
    os.makedirs(settings_dir, exist_ok=True)
    course_vars = ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", "PYTHONPATH")
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        # the lessons' headers say "Python 3": the same name keeps a saved lesson's header unchanged
        "display_name": "Python 3",
        "language": "python",
        "env": {key: env[key] for key in course_vars},
        "metadata": {"debugger": True},
    }
    paths = {
        "kernel": os.path.join(kernel_dir, "kernel.json"),
        "overrides": os.path.join(settings_dir, "overrides.json"),
    }
    for path, content in ((paths["kernel"], spec), (paths["overrides"], VIEWER_OVERRIDES)):
        with open(path, "w") as fh:
            json.dump(content, fh, indent=1)
    return paths


def server_command(port: int, ip: str, settings_dir: str) -> list:
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--ip={ip}",
        f"--port={port}",
        "--ServerApp.port_retries=0",  # the port printed is the port used, or a clear error
        f"--ServerApp.root_dir={ROOT}",
        f"--LabApp.app_settings_dir={settings_dir}",
        "--LabApp.extension_manager=readonly",  # offline machines: no package index queries
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")  # containers and CI run as root
    return command


def _get(url: str, token: str, method: str = "GET", timeout: float = 5) -> int:
    request = urllib.request.Request(
        url, method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()[-n:]
    except OSError:
        return ""


class Lab:
    """One JupyterLab server for the course and everything it starts.

    ``with Lab(port, token) as lab: print(lab.url)``; :meth:`stop` (also on leaving the block) ends
    the server, its kernels and their MPI engines, and returns how many processes outlived it (0)."""

    def __init__(self, port: int | None = None, token: str | None = None, ip: str = "127.0.0.1"):
        check_installed()
        self.ip = ip
        self.port = choose_port(port, ip)
        self.token = token or os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(24)
        self.marker = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.log_path = os.path.join(STATE, f"jupyter-{self.port}.log")
        self.proc = None

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.ip in ("0.0.0.0", "") else self.ip
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/lab?token={self.token}"

    def start(self, timeout: float = START_TIMEOUT) -> str:
        """Start the server and wait until it answers; return the URL with the token."""
        env = lab_env(self.marker)
        env["JUPYTER_TOKEN"] = self.token
        settings = write_settings(env)
        command = server_command(self.port, self.ip, os.path.dirname(settings["overrides"]))
        with open(self.log_path, "w") as log:
            # its own session: Ctrl-C in the terminal reaches this process only, which stops the lab
            # in order (the server's own handler would ask "Shutdown this Jupyter server (y/[n])?")
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = _tail(self.log_path)
                self.stop()
                if "already in use" in log:
                    raise UsageError(
                        f"port {self.port} was taken while the lab started: run 'make lab' again "
                        "(it takes a free port) or pick another with --port"
                    )
                raise RunFailed(
                    f"JupyterLab exited at start (code {self.proc.returncode}); its log, "
                    f"{self.log_path}, ends with: {log[-800:]}"
                )
            try:
                if _get(f"{self.base_url}/api/status", self.token, timeout=2) == 200:
                    return self.url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RunFailed(
            f"JupyterLab did not answer within {timeout:.0f} s; see its log {self.log_path}"
        )

    def members(self) -> list:
        """The processes of this lab still running (the server, kernels, engines, their helpers)."""
        return processes.with_env(MARKER, self.marker)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """Shut the server down (it ends its kernels; their exit stops the engines), then end what
        is left; idempotent. Returns how many processes could not be ended (normally 0)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                _get(f"{self.base_url}/api/shutdown", self.token, method="POST", timeout=5)
                self.proc.wait(timeout)
            except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
                pass
            if self.proc.poll() is None:
                processes.end(processes.by_pid([self.proc.pid]), grace=5, groups=[self.proc.pid])
        # the kernels' own clean-up (engines' atexit and watcher) gets a few seconds, then the rest goes
        left = processes.wait_gone(self.members(), 10)
        processes.end(left, grace=5)
        processes.end_all(self.members)
        return len(self.members())

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _raise_stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.services.lab",
        description="JupyterLab on the course: lessons open as notebooks, %%px lessons start their "
        "MPI engines; Ctrl-C stops the lab, its kernels and engines.",
    )
    parser.add_argument("--port", type=int, help="port to listen on (default: a free one)")
    parser.add_argument("--token", help="access token (default: $JUPYTER_TOKEN, else a random one)")
    parser.add_argument(
        "--ip",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; reach a remote machine with an SSH tunnel)",
    )
    args = parser.parse_args(argv)
    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: a port is a number from 1 to 65535")
    lab = Lab(args.port, args.token, args.ip)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        url = lab.start()
        print(f"[lab] JupyterLab for the course: {url}", flush=True)
        print(
            "[lab] lessons: notebooks/ (double-click opens one as a notebook); "
            f"server log: {os.path.relpath(lab.log_path, ROOT)}; Ctrl-C stops the lab, its kernels "
            "and MPI engines",
            flush=True,
        )
        code = lab.proc.wait()
        raise RunFailed(f"JupyterLab stopped by itself (code {code}); see its log {lab.log_path}")
    except (KeyboardInterrupt, _Stop):
        print("[lab] stopping JupyterLab, its kernels and MPI engines ...", flush=True)
    finally:
        left = lab.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if left:
        print(f"[lab] {left} process(es) could not be stopped", file=sys.stderr, flush=True)
        return 1
    print("[lab] stopped; no process of the lab is left", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
