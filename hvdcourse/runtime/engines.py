"""MPI engines for live ``%%px`` cells in the lessons (lesson: Parameter servers and ring-allreduce).

A lesson starts N ipyparallel engines under ``mpirun`` (each engine is one MPI rank, mpi4py's
``MPI.COMM_WORLD`` spans them, and ``hvd.init()`` on them makes a Horovod job of N ranks), runs
code on all of them with ``%%px``, and stops them in its last cell::

    from hvdcourse.runtime.engines import start_engines, stop_engines
    engines = start_engines(n=2)      # controller + 2 MPI engines; %%px now targets them
    ...
    stop_engines()                    # last cell of the lesson

or, in a script, ``with MPIEngines(n=2, activate=False) as engines: engines.view.execute("...")``.

Clean-up never depends on the lesson reaching its last cell: every cluster is stopped at exit of the
kernel (atexit), and a small watcher process kills the controller's and the engines' process
groups if the kernel dies without running atexit (killed, crashed). If ipyparallel's own stop
fails, the process groups are killed directly.

An MPI collective (a barrier, an allreduce, ``hvd.init()``) waits until EVERY rank has called it.
If one engine never does (an exception before it, a ``%%px --targets 0`` cell), the others wait
forever, and interrupting the kernel does not end the wait: only restarting the engines
(:meth:`MPIEngines.restart`, or ``stop_engines()`` then ``start_engines()``) does.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

from hvdcourse.runtime.mpienv import MPI_YIELD, launch_env, require_mpi
from hvdcourse.runtime.paths import ROOT

START_TIMEOUT = 120  # seconds for the controller and every engine to come up

# The watcher: reads "g PGID" / "p PID" lines on stdin; "done" means a clean stop (exit quietly);
# end of input without "done" means the kernel died: kill the recorded groups and processes.
_WATCHER = r"""
import os, signal, sys, time
groups, pids = [], []
for line in sys.stdin:
    kind, _, number = line.strip().partition(" ")
    if kind == "done":
        sys.exit(0)
    if number.isdigit():
        (groups if kind == "g" else pids).append(int(number))
for sig in (signal.SIGTERM, signal.SIGKILL):
    for target, kill in [(g, os.killpg) for g in groups] + [(p, os.kill) for p in pids]:
        try:
            kill(target, sig)
        except OSError:
            pass
    time.sleep(2)
"""

_ACTIVE: list = []


class EngineStartError(RuntimeError):
    """The engines did not come up; the message says why and what to do."""


class MPIEngines:
    """An ipyparallel controller and ``n`` engines started with ``mpirun`` (one MPI rank each).

    ``activate=True`` registers the ``%px`` / ``%%px`` magics (only inside IPython/Jupyter), without
    progress bars and with each rank's output shown when the cell ends (``%pxconfig --progress-after 2
    --stream`` brings back both).
    ``timeout`` bounds the start-up. ``env`` adds environment variables for the engines. The engines
    yield their core while they wait (:data:`~hvdcourse.runtime.mpienv.MPI_YIELD`, unless the
    environment or ``env`` sets it): between cells an engine with Horovod initialised would
    otherwise keep a core busy.
    Everything lives in a temporary IPYTHONDIR that :meth:`stop` removes.
    """

    def __init__(
        self,
        n: int = 2,
        timeout: float = START_TIMEOUT,
        activate: bool = True,
        env: dict | None = None,
    ):
        if n < 1:
            raise ValueError(f"need at least one engine, got {n}")
        self.n = n
        self.timeout = timeout
        self.activate = activate
        self.extra_env = dict(env or {})
        self.cluster = None
        self.client = None
        self.view = None
        self.ipython_dir = None
        self._watcher = None
        self._groups: list = []

    # ------------------------------------------------------------------ start
    def start(self):
        """Start controller and engines, wait for all of them; return the ipyparallel Client."""
        if self.cluster is not None:
            raise RuntimeError("these engines are already running; call stop() first")
        import ipyparallel as ipp
        from IPython.core.profiledir import ProfileDir
        from traitlets.config import Config

        self.ipython_dir = tempfile.mkdtemp(prefix="hvdcourse-engines-")
        profile_dir = ProfileDir.create_profile_dir(
            os.path.join(self.ipython_dir, "profile_lesson")
        ).location
        config = Config()
        env = self._engine_env()
        config.MPIEngineSetLauncher.environment = env
        config.MPIEngineSetLauncher.mpi_cmd = [require_mpi()]
        # --bind-to none: engines share the cores; as in hvdcourse.runtime.launch for mpirun runs.
        config.MPIEngineSetLauncher.mpi_args = ["--bind-to", "none", "--map-by", "slot"]
        config.LocalControllerLauncher.environment = env
        self.cluster = ipp.Cluster(
            engines="mpi",
            n=self.n,
            profile_dir=profile_dir,
            controller_ip="127.0.0.1",
            engine_timeout=int(self.timeout),
            log_level=40,
            config=config,
        )
        _ACTIVE.append(self)
        self._start_watcher()
        try:
            self.cluster.start_cluster_sync()
            self._record_groups()
            self.client = self.cluster.connect_client_sync()
            self.client.wait_for_engines(self.n, timeout=self.timeout, interactive=False)
            for pid in self.pids():  # engines too, should mpirun have moved them to other groups
                self._tell_watcher(f"p {pid}")
        except Exception as err:
            output = self._engine_output()
            self.stop()
            raise EngineStartError(
                f"{self.n} MPI engines did not start within {self.timeout:.0f} s ({type(err).__name__}: "
                f"{err}). Check 'mpirun -np {self.n} python -c \"import mpi4py.MPI\"' works; "
                f"engine output: {output[-1500:] or '(none)'}"
            ) from None
        self.view = self.client[:]
        self.view.block = True
        if self.activate:
            self.view.activate()
            from IPython import get_ipython

            shell = get_ipython()
            if shell is not None:
                # no progress bars (they fill a built page with carriage returns), and each rank's
                # output printed once the cell has ended: ipyparallel's live streaming can drop a
                # rank's last line when it races the cell's end (seen in JupyterLab)
                shell.run_line_magic("pxconfig", "--progress-after -1 --no-stream")
        return self.client

    def _engine_env(self) -> dict:
        paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        base = launch_env(
            {
                "IPYTHONDIR": self.ipython_dir,
                "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
                "MPLBACKEND": "Agg",
                **{k: os.environ.get(k, v) for k, v in MPI_YIELD.items()},  # idle between cells
                **self.extra_env,
            }
        )
        keep = ("OMPI_", "PMIX_", "HOROVOD_", "TF_", "IPYTHONDIR", "PYTHONPATH", "MPLBACKEND")
        return {k: v for k, v in base.items() if k.startswith(keep) or k in self.extra_env}

    def _start_watcher(self) -> None:
        self._watcher = subprocess.Popen(
            [sys.executable, "-c", _WATCHER],
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def _record_groups(self) -> None:
        """Remember the process groups of the controller and of mpirun (with its engines)."""
        for launcher in [self.cluster.controller, *self.cluster.engines.values()]:
            pid = getattr(launcher, "pid", -1)
            if pid and pid > 0:
                self._groups.append(pid)  # ipyparallel starts each launcher in a new session
                self._tell_watcher(f"g {pid}")

    def _tell_watcher(self, line: str) -> None:
        if self._watcher is not None and self._watcher.poll() is None:
            self._watcher.stdin.write(line + "\n")
            self._watcher.stdin.flush()

    def _engine_output(self) -> str:
        try:
            return "".join(es.get_output() for es in self.cluster.engines.values())
        except Exception:
            return ""

    # ------------------------------------------------------------------ inspect
    def pids(self) -> list:
        """PIDs of the controller, mpirun and the engines (all processes this object started)."""
        import psutil

        found = []
        for pgid in self._groups:
            try:
                leader = psutil.Process(pgid)
            except psutil.NoSuchProcess:
                continue
            found += [leader.pid] + [child.pid for child in leader.children(recursive=True)]
        return sorted(set(found))

    # ------------------------------------------------------------------ stop
    def stop(self, grace: float = 5.0) -> int:
        """Stop engines and controller, killing their processes if that fails; idempotent.

        Returns the number of processes of this cluster still alive afterwards (0 unless the
        operating system refused to kill them)."""
        pids = self.pids()
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
        if self.cluster is not None:
            try:
                self.cluster.stop_cluster_sync()
            except Exception as err:
                print(
                    f"[hvdcourse.engines] ipyparallel stop failed ({type(err).__name__}); "
                    "killing the engines' processes",
                    file=sys.stderr,
                )
            # done here: ipyparallel's own exit hook may skip it
            self.cluster.shutdown_atexit = False
        survivors = _kill(self._groups, pids, grace)
        if self._watcher is not None:
            try:
                self._watcher.communicate("done\n", timeout=5)
            except Exception:
                self._watcher.kill()
        if self.ipython_dir:
            shutil.rmtree(self.ipython_dir, ignore_errors=True)
        self.cluster = self.client = self.view = self._watcher = self.ipython_dir = None
        self._groups = []
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        return survivors

    def restart(self):
        """Stop and start again: the only way to end a rank stuck in an MPI collective."""
        self.stop()
        return self.start()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _kill(groups: list, pids: list, grace: float) -> int:
    """SIGTERM the groups and pids still alive, wait up to ``grace`` s, then SIGKILL what is left.

    Returns how many of ``pids`` are still alive at the end."""
    from hvdcourse.runtime import processes

    return len(processes.end(processes.by_pid(pids), grace, groups=groups))


def start_engines(
    n: int = 2, timeout: float = START_TIMEOUT, activate: bool = True, env: dict | None = None
) -> MPIEngines:
    """Start ``n`` MPI engines for this notebook and activate ``%%px``; see the module docstring."""
    engines = MPIEngines(n=n, timeout=timeout, activate=activate, env=env)
    engines.start()
    return engines


def stop_engines() -> int:
    """Stop every cluster started from this process; return how many processes were still running."""
    return sum(engines.stop() for engines in list(_ACTIVE))


atexit.register(stop_engines)
