"""Which rank this process is, as its launcher announced it (lesson: Faults, hangs and elastic training).

Every launcher the course uses (horovodrun, mpirun, srun with PMIx or PMI) puts the rank into the
environment before Python starts; reading it needs no Horovod and no MPI, so a script can name its
rank in an error line even when it fails before ``hvd.init()``.
"""

from __future__ import annotations

import os

RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launcher_rank(environ=None) -> int:
    """This process's rank as its launcher announced it (0 when started without one)."""
    environ = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return 0
