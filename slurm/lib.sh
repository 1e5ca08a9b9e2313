# shellcheck shell=bash disable=SC2034  # SELECT_GPU, THREADS, TRAINER, REST ...: set here, used by the scripts
# Shared by the course's Slurm scripts (lesson: Multi-node training with Slurm). Sourced, not run.
# A site is a data file slurm/sites/NAME.env (or a path to one): resources, modules, NUMA layout,
# environment. These functions turn it into srun options, so job scripts stay a header + one srun line.

HVDCOURSE_ROOT="${HVDCOURSE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export HVDCOURSE_ROOT

HVD_PYTHON="${HVD_PYTHON:-python3}"  # runs hvdcourse.runtime.binding (standard library only)

hvd_die() { echo "[hvdcourse] ERROR: $*" >&2; exit 2; }

is_dry_run() { [ -n "${DRY_RUN:-}" ] && [ "${DRY_RUN}" != 0 ]; }

# load_site NAME: read the site file; its plain variables are exported (every rank sees them).
load_site() {
  local name="${1:-cpu}"
  case "$name" in
    */*) SITE_FILE="$name" ;;
    *) SITE_FILE="$HVDCOURSE_ROOT/slurm/sites/$name.env" ;;
  esac
  if [ ! -f "$SITE_FILE" ]; then
    local known=("$HVDCOURSE_ROOT"/slurm/sites/*.env)
    known=("${known[@]##*/}")
    hvd_die "no site file $SITE_FILE. Give one of: ${known[*]%.env}, or a path to your own"
  fi
  export HVD_SITE="$name" SITE_FILE
  set -a
  # shellcheck source=/dev/null
  source "$SITE_FILE"
  set +a
  export PYTHONPATH="$HVDCOURSE_ROOT${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's hvdcourse package
  # tf.keras must be tf-keras (Keras 2) on every rank: Horovod's Keras API does not work with Keras 3
  export TF_USE_LEGACY_KERAS=1
}

# site_args USAGE SITE [scheduler options] [-- rest]: load SITE; set SCHED_OPTS (the site's
# SITE_SBATCH, then the user's options, which therefore win) and REST (what follows --).
site_args() {
  local usage="$1"
  shift
  [ $# -ge 1 ] || hvd_die "usage: $usage"
  load_site "$1"
  shift
  read -ra SCHED_OPTS <<< "${SITE_SBATCH:-}"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do SCHED_OPTS+=("$1"); shift; done
  [ "${1:-}" != -- ] || shift
  REST=("$@")
}

# setup_site: the site's modules and virtual environment (inside the job, before srun).
setup_site() {
  if [ -n "${SITE_MODULES:-}" ]; then
    command -v module >/dev/null || hvd_die "SITE_MODULES is set in $SITE_FILE but there is no 'module' command here"
    # shellcheck disable=SC2086  # a list of module names
    module load $SITE_MODULES
  fi
  if [ -n "${SITE_VENV:-}" ]; then
    [ -f "$SITE_VENV/bin/activate" ] || hvd_die "SITE_VENV=$SITE_VENV has no bin/activate: create it (README, 'Installing on a cluster')"
    # shellcheck source=/dev/null
    source "$SITE_VENV/bin/activate"
  fi
}

# step_options: SRUN_OPTS (MPI plugin, kill all ranks if one fails, CPU binding), SELECT_GPU (the
# wrapper giving each rank its GPU) and THREADS (TensorFlow threads per rank) for the srun line.
step_options() {
  local mask threads="${SITE_THREADS:-${SLURM_CPUS_PER_TASK:-}}"
  SRUN_OPTS=(--mpi="${SITE_SRUN_MPI:-pmix}" --kill-on-bad-exit=1)
  # Slurm 22.05-23.02: srun does not inherit the job's --cpus-per-task (each rank would get one
  # core while the trainer is told SITE_THREADS threads); newer srun do. Pass it on, always.
  [ -z "${SLURM_CPUS_PER_TASK:-}" ] || SRUN_OPTS+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
  # one GPU per task, the one nearest its cores (NVIDIA sites: SITE_GPU_BIND=single:1)
  [ -z "${SLURM_GPUS_PER_TASK:-}" ] || SRUN_OPTS+=(--gpus-per-task="$SLURM_GPUS_PER_TASK")
  [ -z "${SITE_GPU_BIND:-}" ] || SRUN_OPTS+=(--gpu-bind="$SITE_GPU_BIND")
  if [ -n "${SITE_GPU_NUMA:-}" ]; then
    mask="$("$HVD_PYTHON" -m hvdcourse.runtime.binding --site "$SITE_FILE" --format mask_cpu)" \
      || hvd_die "cannot compute the CPU masks of $SITE_FILE (see above)"
    SRUN_OPTS+=(--cpu-bind="$mask")
  elif [ -n "${SITE_CPU_BIND:-}" ]; then
    SRUN_OPTS+=(--cpu-bind="$SITE_CPU_BIND")
  fi
  SELECT_GPU=()
  [ -z "${SITE_GPU_VISIBLE_VAR:-}" ] || SELECT_GPU=("$HVDCOURSE_ROOT/slurm/select-gpu")
  THREADS=()
  [ -z "$threads" ] || THREADS=(--threads "$threads")
}

# use_trainer NAME: TRAINER, the module that srun starts (HVD_TRAINER; default the site's
# SITE_TRAINER, else train_hvd: GPU sites default to train_torch_hvd, what their build route builds). Only the
# trainers that take their rank from srun's MPI: train_hvd (Keras), train_tape (TensorFlow custom
# loop), train_torch_hvd (PyTorch). DDP needs torchrun and MWMS its TF_CONFIG: neither runs here.
TRAINERS="train_hvd train_tape train_torch_hvd"
RAY_TRAINERS="train_ray_tf train_ray_torch"  # Ray Train scripts: slurm/ray.sbatch starts them
use_trainer() {
  local name="${1:-${SITE_TRAINER:-train_hvd}}"
  name="${name#hvdcourse.examples.}"
  case " $TRAINERS " in
    *" $name "*) TRAINER="hvdcourse.examples.$name" ;;
    *) hvd_die "HVD_TRAINER=$1: this job runs one of $TRAINERS (srun gives them their ranks; DDP needs torchrun; $RAY_TRAINERS run in slurm/ray.sbatch)" ;;
  esac
}

# use_ray_trainer NAME: TRAINER for slurm/ray.sbatch: a Ray Train script (HVD_TRAINER), which
# starts its workers through Ray, not srun.
use_ray_trainer() {
  local name="${1:-train_ray_tf}"
  name="${name#hvdcourse.examples.}"
  case " $RAY_TRAINERS " in
    *" $name "*) TRAINER="hvdcourse.examples.$name" ;;
    *) hvd_die "HVD_TRAINER=$1: slurm/ray.sbatch runs one of $RAY_TRAINERS" ;;
  esac
}

# job_script: the job script for HVD_TRAINER: slurm/ray.sbatch for a Ray Train script, else
# slurm/train.sbatch (whose srun starts the ranks).
job_script() {
  local name="${HVD_TRAINER:-train_hvd}"
  case " $RAY_TRAINERS " in
    *" ${name#hvdcourse.examples.} "*) echo "$HVDCOURSE_ROOT/slurm/ray.sbatch" ;;
    *) echo "$HVDCOURSE_ROOT/slurm/train.sbatch" ;;
  esac
}

# start_ray_cluster: a Ray head on this node (the batch script runs on the allocation's first
# node) and a Ray worker node on each of the others, one background srun step each running
# `ray start --block` with the job's CPUs per node, no dashboard and a temporary folder of the job;
# waits until every node has joined (wait_ray_nodes); exports RAY_ADDRESS.
# stop_ray_cluster runs on exit, error or scancel: ending the steps ends every Ray process
# (`ray start --block` takes its processes down with it). Never `ray stop`: it kills every Ray
# process of the machine, other users' included.
RAY_STEPS=()
start_ray_cluster() {
  local nodes head ip port n="${SLURM_JOB_NUM_NODES:-1}"
  local cpus="${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-1}}"
  if is_dry_run; then
    nodes=(NODE1 NODE2) head=NODE1 ip=HEAD_IP port=PORT n=2 RAY_TMPDIR=/tmp/ray-JOBID-XXXXXX
  else
    # a folder of this job (job ids repeat across clusters: never reuse another job's folder)
    RAY_TMPDIR="$(mktemp -d "${TMPDIR:-/tmp}/ray-${SLURM_JOB_ID:-0}-XXXXXX")"
    mapfile -t nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST:?not in a Slurm job}")
    head="${nodes[0]}"
    ip="$(python -c 'from ray.util import get_node_ip_address as ip; print(ip())')" \
      || hvd_die "cannot import ray: install ray[train] (requirements.txt) in the job's environment"
    port="$(python -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')"
  fi
  export RAY_ADDRESS="$ip:$port" RAY_TMPDIR
  # --block: the step lasts as long as the node, and ending it ends every Ray process of the node
  local common=(--block --num-cpus="$cpus" --temp-dir="$RAY_TMPDIR" --disable-usage-stats
                --dashboard-agent-listen-port=0)
  # the node name that Slurm gave the step, then the Ray node (its log: $RAY_TMPDIR/start-*.log)
  # shellcheck disable=SC2016  # expanded by the step's bash, on its node
  local say='echo "[ray] $SLURMD_NODENAME: starting a Ray $0 node"; exec "$@"'
  local head_step=(srun --nodes=1 --ntasks=1 --cpus-per-task="$cpus" -w "$head" bash -c "$say" head
    ray start --head --node-ip-address="$ip" --port="$port" --include-dashboard=false "${common[@]}")
  local worker_step=(srun --nodes=$((n - 1)) --ntasks=$((n - 1)) --cpus-per-task="$cpus"
    --exclude="$head" bash -c "$say" worker ray start --address="$RAY_ADDRESS" "${common[@]}")
  if is_dry_run; then
    echo "[dry-run] $(show_command "${head_step[@]}") &"
    [ "$n" -le 1 ] || echo "[dry-run] $(show_command "${worker_step[@]}") &"
    return 0
  fi
  trap stop_ray_cluster EXIT
  trap 'exit 143' TERM INT
  echo "[ray] head on $head at $RAY_ADDRESS; $((n - 1)) worker node(s); $cpus CPU(s) per node"
  start_ray_step head 1 "${head_step[@]}"  # a worker node started before the head registered gives up
  [ "$n" -le 1 ] || start_ray_step workers "$n" "${worker_step[@]}"
  grep -h '^\[ray\]' "$RAY_TMPDIR"/start-*.log
}

# start_ray_step NAME N CMD...: run the srun step CMD in the background (its output in
# $RAY_TMPDIR/start-NAME.log) until the cluster has N nodes. On a busy machine `ray start` can give
# up ("The current node timed out during startup": Ray waits 30 s for its own processes): the step
# is started again, RAY_START_TRIES times in all (default 3), then the job stops with the logs.
start_ray_step() {
  local name="$1" n="$2" try
  shift 2
  for ((try = 1; try <= ${RAY_START_TRIES:-3}; try++)); do
    "$@" >> "$RAY_TMPDIR/start-$name.log" 2>&1 &
    RAY_STEPS+=($!)
    wait_ray_nodes "$n" $! && return 0
    echo "[ray] the $name step ended before its Ray node(s) joined (try $try of ${RAY_START_TRIES:-3})"
  done
  cat "$RAY_TMPDIR"/start-*.log >&2
  hvd_die "the Ray cluster did not reach $n node(s) in ${RAY_START_TRIES:-3} tries; the start logs are above"
}

# wait_ray_nodes N PID: until N Ray nodes have joined (0), or the step PID has ended (1); stop the
# job after RAY_START_TIMEOUT s (default 180).
wait_ray_nodes() {
  local joined=0 deadline=$((SECONDS + ${RAY_START_TIMEOUT:-180}))
  until joined="$(timeout 30 ray status --address="$RAY_ADDRESS" 2>/dev/null | grep -c ' node_')" \
      && [ "$joined" -ge "$1" ]; do
    kill -0 "$2" 2>/dev/null || return 1
    [ "$SECONDS" -lt "$deadline" ] || hvd_die "the Ray cluster did not reach $1 node(s) within ${RAY_START_TIMEOUT:-180} s (${joined:-0} joined); see $RAY_TMPDIR/start-*.log"
    sleep 2
  done
  echo "[ray] $joined node(s) joined"
}

stop_ray_cluster() {
  local pid
  [ "${#RAY_STEPS[@]}" -gt 0 ] || return 0
  echo "[ray] stopping the Ray cluster"
  for pid in "${RAY_STEPS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${RAY_STEPS[@]}"; do wait "$pid" 2>/dev/null || true; done
  RAY_STEPS=()
  rm -rf "$RAY_TMPDIR"  # this node's copy: Ray's sessions and logs of this job
  echo "[ray] Ray cluster stopped"
}

# use_site NAME: all of the above, for job scripts.
use_site() {
  load_site "$1"
  is_dry_run || setup_site
  step_options
}

# option_value NAME ARGS...: the value of the last --NAME=V or --NAME V among ARGS (empty if none).
option_value() {
  local name="--$1" value="" previous="" arg
  shift
  for arg in "$@"; do
    case "$arg" in "$name"=*) value="${arg#*=}" ;; esac
    [ "$previous" != "$name" ] || value="$arg"
    previous="$arg"
  done
  echo "$value"
}

# tasks_per_node: from the allocation (SLURM_TASKS_PER_NODE is e.g. "2" or "2(x3),1"), else from
# the site's SITE_SBATCH (dry runs); Slurm's default is one task per node.
tasks_per_node() {
  local site_opts n="${SLURM_TASKS_PER_NODE:-}"
  n="${SLURM_NTASKS_PER_NODE:-${n%%[(,]*}}"
  read -ra site_opts <<< "${SITE_SBATCH:-}"
  [ -n "$n" ] || n="$(option_value ntasks-per-node "${site_opts[@]}")"
  echo "${n:-1}"
}

# show_command ARGS...: the command on one line, quoted only where the shell needs it.
show_command() {
  local arg out=()
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=("$arg"); else out+=("$(printf '%q' "$arg")"); fi
  done
  echo "${out[*]}"
}

# print_binding: what each local rank gets (GPU and cores), for dry runs and job logs.
print_binding() {
  local ntasks rank gpu="no GPU"
  ntasks="$(tasks_per_node)"
  echo "[binding] $ntasks rank(s) per node; per local rank:"
  if [ -n "${SITE_GPU_NUMA:-}" ]; then
    "$HVD_PYTHON" -m hvdcourse.runtime.binding --site "$SITE_FILE" | head -n "$ntasks" | sed 's/^/[binding] /'
    return
  fi
  for ((rank = 0; rank < ntasks; rank++)); do
    [ -z "${SITE_GPU_VISIBLE_VAR:-}" ] || gpu="${SITE_GPU_VISIBLE_VAR}=$rank"
    [ -z "${SITE_GPU_BIND:-}" ] || gpu="one GPU, the closest to its cores (srun --gpu-bind=$SITE_GPU_BIND)"
    echo "[binding] local rank $rank: $gpu  cores: ${SITE_CPU_BIND:+--cpu-bind=$SITE_CPU_BIND, }chosen by Slurm"
  done
}

# requeue_job: SIGUSR1 handler (#SBATCH --signal=B:USR1@...): requeue before the time limit; the
# trainer resumes from its last checkpoint in the same --checkpoint-dir (same job id).
requeue_job() {
  local restarts="${SLURM_RESTART_COUNT:-0}" max="${HVD_MAX_REQUEUES:-3}"
  if [ "$restarts" -lt "$max" ]; then
    echo "[hvdcourse] time limit near: requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of $max); training resumes from the last checkpoint"
    scontrol requeue "$SLURM_JOB_ID" || echo "[hvdcourse] scontrol requeue failed: resubmit with the same --checkpoint-dir to continue."
  else
    echo "[hvdcourse] time limit near and $max requeues done: not requeueing. Resubmit with the same --checkpoint-dir to continue."
  fi
}

# print_gpu_build_vars: for a site built by the GPU route (SITE_HOROVOD_BUILD="NAME=value ...
# tools/setup_gpu.sh"), the build variables that the route gives with the site's values, on this machine.
print_gpu_build_vars() {
  local words vars
  [[ "${SITE_HOROVOD_BUILD:-}" == *tools/setup_gpu.sh* ]] || return 0
  read -ra words <<< "$SITE_HOROVOD_BUILD"
  vars="$(cd "$HVDCOURSE_ROOT" && env "${words[@]}" --print-vars | tr '\n' ' ')" \
    || hvd_die "tools/setup_gpu.sh --print-vars failed for $SITE_FILE (see above)"
  echo "[dry-run] its build variables here: ${vars% }"
}

# run_step CMD...: run the job step in the background so that SIGUSR1 is handled at once; with
# DRY_RUN=1, print it (and the binding) instead.
run_step() {
  if is_dry_run; then
    echo "[dry-run] site $HVD_SITE: ${SITE_DESCRIPTION:-}"
    echo "[dry-run] modules: ${SITE_MODULES:-(none)}; virtual environment: ${SITE_VENV:-(python from PATH)}"
    [ -z "${SITE_HOROVOD_BUILD:-}" ] || echo "[dry-run] Horovod build for this site: $SITE_HOROVOD_BUILD${SITE_GPU_VISIBLE_VAR:+ (a GPU build: not executed by the course, which has no GPU)}"
    print_gpu_build_vars
    echo "[dry-run] $(show_command "$@")"
    print_binding
    return 0
  fi
  trap requeue_job USR1
  echo "[hvdcourse] job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}, site $HVD_SITE, restart ${SLURM_RESTART_COUNT:-0}"
  echo "[hvdcourse] $(show_command "$@")"
  print_binding
  "$@" &
  local pid=$! rc=0
  wait "$pid" || rc=$?
  while kill -0 "$pid" 2>/dev/null; do  # wait was interrupted by the signal: wait for the step
    rc=0
    wait "$pid" || rc=$?
  done
  return "$rc"
}
