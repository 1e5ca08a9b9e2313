#!/bin/bash
# Submit slurm/train.sbatch with a site's resources (lesson: Multi-node training with Slurm).
#   slurm/submit.sh SITE [sbatch options] [-- trainer options]
#   slurm/submit.sh cpu --nodes=2 --ntasks-per-node=1 -- --epochs 3
#   DRY_RUN=1 slurm/submit.sh lumi-g       prints the sbatch and srun lines and each rank's binding
#   HVD_TRAINER=train_torch_hvd slurm/submit.sh cpu   the PyTorch trainer (default: the site's
#                                                     SITE_TRAINER; train_hvd, Keras, if it has none)
#   HVD_TRAINER=train_ray_tf slurm/submit.sh cpu      a Ray Train script: slurm/ray.sbatch starts a Ray
#                                                     cluster on the nodes, then the script
# SITE: a name in slurm/sites/ or a path to your own site file. Your options come after the site's
# SITE_SBATCH, so they win.
set -euo pipefail
# shellcheck source=slurm/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
site_args "slurm/submit.sh SITE [sbatch options] [-- trainer options]" "$@"
job="$(job_script)"  # slurm/ray.sbatch for a Ray Train script, else slurm/train.sbatch
if [ "$job" = "$HVDCOURSE_ROOT/slurm/ray.sbatch" ]; then
  use_ray_trainer "$HVD_TRAINER"
else
  use_trainer "${HVD_TRAINER:-${SITE_TRAINER:-train_hvd}}"  # a wrong name fails here, not in the queue
fi
command=(sbatch "${SCHED_OPTS[@]}" "$job" "${REST[@]}")
if is_dry_run; then
  echo "[dry-run] $(show_command "${command[@]}")"
  SLURM_NTASKS_PER_NODE="$(option_value ntasks-per-node "${SCHED_OPTS[@]}")"  # what the job would get
  SLURM_CPUS_PER_TASK="$(option_value cpus-per-task "${SCHED_OPTS[@]}")"
  SLURM_GPUS_PER_TASK="$(option_value gpus-per-task "${SCHED_OPTS[@]}")"
  export SLURM_NTASKS_PER_NODE SLURM_CPUS_PER_TASK SLURM_GPUS_PER_TASK
  exec bash "$job" "${REST[@]}"
fi
exec "${command[@]}"  # the job gets HVD_SITE and HVDCOURSE_ROOT through sbatch's default --export=ALL
