"""An SSH server on 127.0.0.1 for a hostfile launch over real ``ssh`` (lesson: Multi-node training with Slurm).

Without a scheduler, ``horovodrun -np 2 -hostfile HOSTLIST -p PORT python train.py`` starts the ranks
over ``ssh`` on the hosts the hostfile lists, on the SSH port ``PORT``. :class:`SshServer` gives one
machine what that needs, without touching the machine's own SSH set-up:

* Debian's ``sshd`` (package ``openssh-server``) started by itself (not the system service) on a
  free port of 127.0.0.1, with a configuration, a host key and a log of its own in a temporary
  folder: key logins only, for the keys in its own ``authorized_keys``;
* a key pair made for the run (as the course's Ansible playbook gives the lab user one:
  ``ssh-keygen -t ed25519 -N ""`` on the head node, its public half accepted on every node);
* an ``ssh`` client configuration that names the hosts of the hostfile (``node1``, ``node2``) and
  sends them to 127.0.0.1, with that key and a known-hosts file of its own, and an ``ssh`` command
  in :attr:`bin_dir` that uses it: put first on ``PATH`` (:meth:`env`), it is the ``ssh`` that
  ``horovodrun`` and ``mpirun`` call, as a site's ``~/.ssh/config`` would be (yours stays unread
  and untouched).

The host names matter: ``horovodrun`` treats an address of this machine (``localhost``,
127.0.0.1) as local and starts its ranks without ``ssh``; a name it cannot resolve to one of this
machine's addresses is a remote host, reached through ``ssh``::

    with SshServer() as server:
        hostfile = server.write_hostfile(folder)            # node1 slots=1, node2 slots=1
        run(["horovodrun", "-np", "2", "-hostfile", hostfile, "-p", str(server.port), ...],
            env=server.env())
        server.accepted()                                   # sshd's "Accepted publickey" lines

Leaving the ``with`` block ends sshd and every session it started, and removes the folder. When run
as root, sshd needs its privilege-separation folder ``/run/sshd`` (empty; the system service
creates it at boot): it is created if missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import psutil

from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import CourseError, MissingToolError
from hvdcourse.runtime.ports import free_port

HOSTS = ("node1", "node2")
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


class SshServerError(CourseError, RuntimeError):
    """sshd did not start or did not answer."""


def find_tool(name: str, package: str) -> str:
    """The path of ``name`` (also in the sbin folders, which a normal user's PATH lacks)."""
    path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(SBIN))
    if not path:
        raise MissingToolError(
            f"'{name}' is not installed: install the Debian package {package} "
            f"(sudo apt-get install {package}; 'make env' does it as root)"
        )
    return path


class SshServer:
    """sshd on a free port of 127.0.0.1 with its own keys, and an ``ssh`` that reaches it as
    ``hosts`` (see the module's docstring). ``timeout``: seconds to wait for sshd to answer."""

    def __init__(self, hosts=HOSTS, timeout: float = 20):
        self.hosts = tuple(hosts)
        self.timeout = timeout
        self.sshd = find_tool("sshd", "openssh-server")
        self.ssh = find_tool("ssh", "openssh-client")
        self.keygen = find_tool("ssh-keygen", "openssh-client")
        self.folder = None
        self.port = None
        self.proc = None

    @property
    def bin_dir(self) -> str:
        """The folder of the course's ``ssh`` command (put first on PATH)."""
        return os.path.join(self.folder, "bin")

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def __enter__(self) -> SshServer:
        self.folder = tempfile.mkdtemp(prefix="hvdcourse-sshd-")
        try:
            for key, comment in (
                ("host_ed25519", "hvdcourse-host"),
                ("id_ed25519", "hvdcourse-lab"),
            ):
                subprocess.run(
                    [
                        self.keygen,
                        "-q",
                        "-t",
                        "ed25519",
                        "-N",
                        "",
                        "-C",
                        comment,
                        "-f",
                        self._path(key),
                    ],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            shutil.copy(self._path("id_ed25519.pub"), self._path("authorized_keys"))
            os.chmod(self._path("authorized_keys"), 0o600)
            self.port = free_port()
            with open(self._path("sshd_config"), "w") as fh:
                fh.write(self.sshd_config())
            with open(self._path("ssh_config"), "w") as fh:
                fh.write(self.ssh_config())
            os.makedirs(self.bin_dir)
            with open(os.path.join(self.bin_dir, "ssh"), "w") as fh:
                fh.write(f'#!/bin/sh\nexec {self.ssh} -F {self._path("ssh_config")} "$@"\n')
            os.chmod(os.path.join(self.bin_dir, "ssh"), 0o755)
            if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
                os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
            with open(self._path("sshd.log"), "w") as log:
                self.proc = subprocess.Popen(
                    [self.sshd, "-D", "-e", "-f", self._path("sshd_config")],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.folder,
                    start_new_session=True,
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def sshd_config(self) -> str:
        """The server's configuration: this folder's host key and authorized keys, keys only."""
        return "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {self.port}",
                f"HostKey {self._path('host_ed25519')}",
                f"AuthorizedKeysFile {self._path('authorized_keys')}",
                f"PidFile {self._path('sshd.pid')}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",  # the folder is a temporary one, not a home's .ssh
                "",
            ]
        )

    def ssh_config(self) -> str:
        """The client's configuration: the hostfile's names go to 127.0.0.1 with this folder's key."""
        return "\n".join(
            [
                f"Host {' '.join(self.hosts)}",
                "  HostName 127.0.0.1",
                "Host *",
                f"  IdentityFile {self._path('id_ed25519')}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {self._path('known_hosts')}",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking accept-new",
                "  BatchMode yes",
                "  LogLevel ERROR",
                "",
            ]
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SshServerError(
                    f"sshd exited at start (code {self.proc.returncode}): {self.log().strip()[-500:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
                    if sock.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise SshServerError(
            f"sshd did not answer on 127.0.0.1:{self.port} within {self.timeout:.0f} s"
        )

    def env(self, base: dict | None = None) -> dict:
        """``base`` (default: this process' environment) with the course's ``ssh`` first on PATH."""
        env = dict(os.environ if base is None else base)
        env["PATH"] = os.pathsep.join([self.bin_dir, env.get("PATH", os.defpath)])
        return env

    def write_hostfile(self, folder: str, slots: int = 1, name: str = "HOSTLIST") -> str:
        """A hostfile (``host slots=N`` per line) naming :attr:`hosts`; its path."""
        path = os.path.join(folder, name)
        with open(path, "w") as fh:
            fh.writelines(f"{host} slots={slots}\n" for host in self.hosts)
        return path

    def log(self) -> str:
        """sshd's log so far."""
        try:
            with open(self._path("sshd.log"), errors="replace") as fh:
                return fh.read()
        except (OSError, TypeError):
            return ""

    def accepted(self) -> list:
        """sshd's ``Accepted publickey for USER from 127.0.0.1 port N`` lines, key digest left out."""
        return [
            line.split(" ssh2")[0]
            for line in self.log().splitlines()
            if line.startswith("Accepted ")
        ]

    def stop(self) -> None:
        """End sshd and the sessions it started; remove the folder. Safe to call twice."""
        if self.proc is not None:
            try:
                sessions = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.Error:
                sessions = []
            processes.end(
                [*sessions, *processes.by_pid([self.proc.pid])], grace=5.0, groups=[self.proc.pid]
            )
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
