"""Environment for launching MPI / Horovod processes (lesson: Installing Horovod).

OpenMPI refuses to run as root and to start more ranks than cores unless told to; containers and CI
run as root on small machines, so every launcher of the course goes through :func:`launch_env`.
"""

from __future__ import annotations

import os
import shutil

from hvdcourse import KERAS_2_ENV

# Why each variable: root is common in containers/CI; oversubscription lets 2 ranks share 1 core;
# the fault settings (lesson: Faults, hangs and elastic training) are set here, not left to defaults:
# - mpirun ends the whole job as soon as one rank exits non-zero or is killed;
# - Horovod's stall check warns after 20 s when some ranks wait in a collective that others never
#   join, and shuts Horovod down after 60 s, so a rank stuck outside Horovod ends the job;
# - Gloo gives up on a peer that does not answer within 30 s (rendezvous and collectives).
_MPI_DEFAULTS = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PMIX_MCA_gds": "hash",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "20",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60",
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "30",
    "OMPI_MCA_orte_abort_on_non_zero_status": "1",
}


# Open MPI busy-polls while a rank waits, and Horovod's background thread waits in MPI every cycle
# even with nothing to reduce: an idle rank keeps a core busy. On a 2-core machine two idle ranks
# took 44% of what a CPU-bound pair of processes beside them got done (measured 2026-11-27; 16% with
# this setting). The lessons' interactive engines, idle between cells, set it; launch_env does not:
# the performance lesson measures both settings, and a rank that yields while others beside it spin
# only hands them its core (a test session with it, beside the book build without it, took longer).
MPI_YIELD = {"OMPI_MCA_mpi_yield_when_idle": "1"}


def launch_env(extra: dict | None = None, base: dict | None = None) -> dict:
    """Return a copy of ``base`` (default: ``os.environ``) with the course's MPI defaults added.

    Values already set by the user win, so a site can override any of them (except the Keras 2 switch).
    """
    env = dict(os.environ if base is None else base)
    for key, value in _MPI_DEFAULTS.items():
        env.setdefault(key, value)
    env.update(KERAS_2_ENV)  # not a default but a requirement: Horovod's Keras API needs Keras 2
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def require_mpi() -> str:
    """Return the path of ``mpirun`` or raise a :class:`~hvdcourse.runtime.errors.MissingToolError` (a
    ``RuntimeError``) that says how to install MPI."""
    from hvdcourse.runtime.errors import MissingToolError

    path = shutil.which("mpirun")
    if path is None:
        raise MissingToolError(
            "MPI not found: no 'mpirun' on PATH. Install OpenMPI (sudo apt-get install openmpi-bin "
            "libopenmpi-dev) or load your site's MPI module (module load openmpi), then retry."
        )
    return path
