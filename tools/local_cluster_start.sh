#!/bin/bash
# Start the course's local 2-node Slurm cluster (installs munge + Slurm with apt when root and
# missing), wait until node1 and node2 are idle. Idempotent. Options: --dir FOLDER, --timeout S.
# Then: export SLURM_CONF=/tmp/hvdcourse-slurm/slurm.conf; sinfo; slurm/submit.sh cpu --wait
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${VENV:-$ROOT/.venv}/bin/python" -m hvdcourse.course.services.slurm_cluster start "$@"
