"""hvdcourse.runtime.engines: MPI engines start, run %%px cells, and never outlive their notebook."""

import os
import signal
import subprocess
import textwrap
import time

import psutil
import pytest

from conftest import PYTHON, ROOT
from hvdcourse.runtime import engines as engines_mod
from hvdcourse.runtime.engines import EngineStartError, MPIEngines


def alive(pids):
    """The pids that still run (zombies count as gone: they only wait for their parent to reap them)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_until_gone(pids, seconds=15):
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


# Each start costs about 9 s of CI time, so one started cluster is checked for everything a start
# and a stop must give.
def test_two_engines_are_one_mpi_job_and_stop_leaves_no_process_or_folder():
    engines = MPIEngines(n=2, activate=False)
    engines.start()
    try:
        pids = engines.pids()
        folder = engines.ipython_dir
        assert os.path.isdir(folder)
        commands = " ".join(" ".join(psutil.Process(p).cmdline()) for p in pids)
        assert (
            "ipyparallel.controller" in commands
            and "ipyparallel.engine" in commands
            and "mpirun" in commands
        )
        engines.view.execute(
            "from mpi4py import MPI; me = (MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size)\n"
            "import os; yields = os.environ.get('OMPI_MCA_mpi_yield_when_idle')"
        )
        assert engines.view.pull("me") == [(0, 2), (1, 2)]
        # idle between cells, a rank with Horovod initialised would otherwise keep a core busy
        assert engines.view.pull("yields") == ["1", "1"]
    finally:
        assert engines.stop() == 0
    assert wait_until_gone(pids) == []
    assert not os.path.exists(folder), "the temporary IPython folder outlived stop()"
    assert engines.stop() == 0, "a second stop must be harmless"


def test_a_yield_setting_of_the_caller_or_the_environment_wins(monkeypatch):
    monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", "0")
    assert MPIEngines()._engine_env()["OMPI_MCA_mpi_yield_when_idle"] == "0"
    monkeypatch.delenv("OMPI_MCA_mpi_yield_when_idle")
    assert MPIEngines()._engine_env()["OMPI_MCA_mpi_yield_when_idle"] == "1"
    asked = MPIEngines(env={"OMPI_MCA_mpi_yield_when_idle": "0"})._engine_env()
    assert asked["OMPI_MCA_mpi_yield_when_idle"] == "0"


def test_px_cell_runs_on_every_engine_and_stop_engines_forgets_the_cluster():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    engines = engines_mod.start_engines(n=2)
    try:
        result = shell.run_cell(
            "%%px\nfrom mpi4py import MPI\nrank_seen = MPI.COMM_WORLD.Get_rank() * 10"
        )
        assert result.success, result.error_in_exec
        assert engines.view.pull("rank_seen") == [0, 10]
    finally:
        assert engines_mod.stop_engines() == 0
    assert engines_mod._ACTIVE == []


def test_a_start_timeout_says_what_to_do_and_leaves_nothing():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(EngineStartError, match="did not start within"):
        MPIEngines(n=2, timeout=0.5, activate=False).start()
    assert wait_until_gone(started_since(before)) == []


def started_since(before: set) -> list:
    """This process's descendants that the code under test started: new ones whose ancestors up to this
    process are new too (the book build that `make test` runs beside the tests is a child of this
    process, and the lessons it executes start processes of their own all the time)."""
    me, found = os.getpid(), []
    for proc in psutil.Process().children(recursive=True):
        try:
            chain = [a.pid for a in proc.parents()]
        except psutil.NoSuchProcess:
            continue
        chain = chain[: chain.index(me)] if me in chain else chain
        if proc.pid not in before and not any(pid in before for pid in chain):
            found.append(proc.pid)
    return found


OWNER = textwrap.dedent("""
    import os, signal, sys
    from hvdcourse.runtime.engines import start_engines
    engines = start_engines(n=2, activate=False)
    print("PIDS", *engines.pids(), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)   # no atexit, no finally: only the watcher can clean up
    # "exit": leave without stop_engines(); atexit must stop them
""")


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_engines_die_with_the_process_that_started_them(how):
    proc = subprocess.run(
        [PYTHON, "-c", OWNER, how],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    if how == "kill":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 0, proc.stderr[-2000:]
    pids = [
        int(p)
        for line in proc.stdout.splitlines()
        if line.startswith("PIDS")
        for p in line.split()[1:]
    ]
    # controller, mpirun, 2 engines at least
    assert len(pids) >= 4, proc.stdout + proc.stderr[-2000:]
    assert wait_until_gone(pids, seconds=20) == []


def test_processes_are_killed_when_ipyparallel_stop_fails(monkeypatch):
    engines = MPIEngines(n=2, activate=False)
    engines.start()
    pids = engines.pids()

    def broken_stop():
        raise RuntimeError("simulated failure of ipyparallel's stop")

    monkeypatch.setattr(engines.cluster, "stop_cluster_sync", broken_stop)
    assert engines.stop(grace=2) == 0
    assert wait_until_gone(pids) == []


def test_restart_ends_a_rank_stuck_in_an_mpi_barrier():
    engines = MPIEngines(n=2, activate=False)
    engines.start()
    try:
        stuck = engines.client[0].execute(
            "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()", block=False
        )
        time.sleep(2)
        assert not stuck.ready()  # rank 1 never joins: rank 0 waits in the barrier
        old = engines.pids()
        engines.restart()
        assert wait_until_gone(old) == []
        engines.view.execute("from mpi4py import MPI; n = MPI.COMM_WORLD.size")
        assert engines.view.pull("n") == [2, 2]
    finally:
        engines.stop()
