#!/bin/bash
# Print a Horovod/OpenMPI hostfile ("host slots=N", the ELKH Cloud slides' HOSTLIST format) for the current
# allocation (lesson: Multi-node training with Slurm). Inside salloc or a job script:
#   slurm/hostfile.sh > HOSTLIST
#   horovodrun -np "$SLURM_NTASKS" -hostfile HOSTLIST python -m hvdcourse.examples.train_hvd
# SLURM_TASKS_PER_NODE reads e.g. "4(x2),2": 4 tasks on each of the first two nodes, 2 on the third.
set -euo pipefail
: "${SLURM_JOB_NODELIST:?run me inside an allocation (salloc, sbatch)}"
slots=()
IFS=, read -ra parts <<< "${SLURM_TASKS_PER_NODE:-1}"
for part in "${parts[@]}"; do
  if [[ "$part" =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
    for ((i = 0; i < BASH_REMATCH[2]; i++)); do slots+=("${BASH_REMATCH[1]}"); done
  else
    slots+=("$part")
  fi
done
names="$(scontrol show hostnames "$SLURM_JOB_NODELIST")"  # node[1-2] -> node1 node2
mapfile -t hosts <<< "$names"
for i in "${!hosts[@]}"; do
  echo "${hosts[$i]} slots=${slots[$i]:-1}"
done
