#!/bin/bash
# Stop the course's local Slurm cluster: cancel its jobs, stop slurmd x2, slurmctld and its private
# munged, kill anything of it that is left. Options: --dir FOLDER (as given to the start).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${VENV:-$ROOT/.venv}/bin/python" -m hvdcourse.course.services.slurm_cluster stop "$@"
