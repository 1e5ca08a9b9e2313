"""Which rank this process is, as its launcher announced it (lesson: Faults, hangs and elastic training).

Every launcher the course uses (horovodrun, mpirun, srun with PMIx or PMI, torchrun) puts the rank into the
environment before Python starts; reading it needs no Horovod and no MPI, so a script can name its
rank in an error line even when it fails before ``hvd.init()``.
"""

from __future__ import annotations

import os

# torchrun's RANK, WORLD_SIZE and LOCAL_RANK come last: generic names, read only when no MPI,
# Horovod or Slurm launcher announced the rank
RANK_VARIABLES = (
    "HOROVOD_RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "RANK",
)
SIZE_VARIABLES = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE")
LOCAL_RANK_VARIABLES = (
    "HOROVOD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
    "LOCAL_RANK",
)


def _announced(names, environ=None):
    environ = os.environ if environ is None else environ
    for name in names:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return None


def announced_rank(environ=None):
    """This process's rank as its launcher announced it, or None when no launcher started it."""
    return _announced(RANK_VARIABLES, environ)


def launcher_rank(environ=None) -> int:
    """This process's rank as its launcher announced it (0 when started without one)."""
    rank = announced_rank(environ)
    return 0 if rank is None else rank


def launcher_size(environ=None) -> int:
    """How many ranks the launcher started (1 without one)."""
    size = _announced(SIZE_VARIABLES, environ)
    return 1 if size is None else size


def launcher_local_rank(environ=None) -> int:
    """This process's rank among the ranks of its node (0 without a launcher)."""
    local = _announced(LOCAL_RANK_VARIABLES, environ)
    return 0 if local is None else local
