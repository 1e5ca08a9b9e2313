#!/bin/bash
# An interactive allocation with a site's resources (lesson: Multi-node training with Slurm).
#   slurm/interactive.sh SITE [salloc options] [-- command]      (run it from the course folder)
#   slurm/interactive.sh cpu --time=00:30:00        a shell on the login node, holding 2 nodes; in it:
#       bash slurm/train.sbatch --epochs 1          the job script's srun line, run by hand
#       srun --ntasks=1 hostname                    anything else, on the allocated nodes
#       exit                                        give the nodes back
#   slurm/interactive.sh lumi-g --account=<your_project> --time=00:15:00 -- bash slurm/train.sbatch --epochs 1
set -euo pipefail
# shellcheck source=slurm/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
site_args "slurm/interactive.sh SITE [salloc options] [-- command]" "$@"
command=(salloc "${SCHED_OPTS[@]}" "${REST[@]}")
if is_dry_run; then
  echo "[dry-run] $(show_command "${command[@]}")"
  exit 0
fi
exec "${command[@]}"
