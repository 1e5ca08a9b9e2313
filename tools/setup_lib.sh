# shellcheck shell=bash disable=SC2034  # HOROVOD_VERSION, CACHE_DIR: used by the scripts that source this
# Shared by tools/setup_env.sh (the CPU build, `make env`) and tools/setup_gpu.sh (the GPU route,
# `make gpu`): sourced, not run. Set SETUP_NAME (the prefix of messages) and ROOT before sourcing.
HOROVOD_VERSION="0.28.1"
CACHE_DIR="${HVDCOURSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hvdcourse}"

die() { echo "${SETUP_NAME:-setup}: ERROR: $*" >&2; exit 1; }
say() { echo "${SETUP_NAME:-setup}: $*"; }

# phase NAME: the set-up's phases and their seconds, printed in one line by phases_done (the cold
# set-up's time, phase by phase: `make env` and CI's log show where it goes). Bash's own clock
# ($SECONDS): no outside command.
PHASE_NAME="" PHASE_START=0 PHASE_TIMES=""
phase() {
  [ -z "$PHASE_NAME" ] || PHASE_TIMES+="${PHASE_TIMES:+, }$PHASE_NAME $(( SECONDS - PHASE_START )) s"
  PHASE_NAME="${1:-}" PHASE_START=$SECONDS
}
phases_done() {
  phase
  say "set-up times: $PHASE_TIMES"
}

# patch_hash [SET...]: the wheel keys' part for the patches: patches/horovod-<version>/*.patch, then
# each SET's (a subfolder). Without SETs this is the CPU build's hash, so a GPU-only patch never
# changes the CPU wheel's key.
patch_hash() {
  local dir="$ROOT/patches/horovod-$HOROVOD_VERSION" files=() set
  files=("$dir"/*.patch)
  for set in "$@"; do files+=("$dir/$set"/*.patch); done
  cat "${files[@]}" | sha256sum | cut -c1-8
}

# install_inputs: what `make env`'s pip steps install from: requirements.txt and pyproject.toml without
# the sections of tools that do not change the install (pytest, ruff, import-linter); the set-up's
# stamp and the container image's key (tools/container_check.sh) hash it
install_inputs() {
  cat "$ROOT/requirements.txt"
  awk '/^\[/ { keep = ($0 !~ /^\[\[?tool\./ || $0 ~ /^\[tool\.setuptools/) } keep' "$ROOT/pyproject.toml"
}

# mpi_id: the MPI that mpirun belongs to, for the wheel keys (e.g. Open_MPI_4.1.4)
mpi_id() {
  mpirun --version 2>&1 | grep -oE '(Open MPI|MPICH|Intel|Version:)[^0-9]*[0-9][0-9.]*' | head -1 | tr -c 'A-Za-z0-9.\n' '_' || true
}

# pip, minus the warnings about optional local package folders that some machines configure ($PY: the venv's python)
pip_q() { "$PY" -m pip -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

# build_horovod_wheel WHEEL_DIR HINT [SET...]: Horovod's source from the package registry, the course's
# patches (tools/patch_horovod.sh, plus each SET's), compiled once into WHEEL_DIR with the HOROVOD_*
# variables of the caller's environment. HINT: what to check when the build fails.
build_horovod_wheel() {
  local wheel_dir="$1" hint="$2"
  shift 2
  HVD_SRC_DIR="$(mktemp -d)"
  trap 'rm -rf "$HVD_SRC_DIR"' EXIT
  pip_q download --no-deps --no-binary :all: -d "$HVD_SRC_DIR" "horovod==$HOROVOD_VERSION" \
    || die "could not download Horovod $HOROVOD_VERSION's source (pip download horovod==$HOROVOD_VERSION)"
  tar -xzf "$HVD_SRC_DIR"/horovod-"$HOROVOD_VERSION".tar.gz -C "$HVD_SRC_DIR"
  bash "$ROOT/tools/patch_horovod.sh" "$HVD_SRC_DIR/horovod-$HOROVOD_VERSION" "$@"
  mkdir -p "$wheel_dir.tmp"
  pip_q wheel --no-cache-dir --no-build-isolation --no-deps \
    -w "$wheel_dir.tmp" "$HVD_SRC_DIR/horovod-$HOROVOD_VERSION" || die "Horovod build failed (see above). $hint"
  rm -rf "$wheel_dir" && mv "$wheel_dir.tmp" "$wheel_dir"
}

# shareable_python PYTHON: the interpreter for a new venv. As root, a venv made from an interpreter
# that other accounts cannot run (pyenv's in root's home, mode 700, on the course's own machine) serves
# no one else: the class hub's learners and the non-root grader would need a second course venv (4 GB,
# minutes). Then the system's python3 ($SYSTEM_PYTHON, default /usr/bin/python3) is printed instead when
# it is the same Python version (the same wheels and Horovod build), with one line on stderr; otherwise
# PYTHON itself.
shareable_python() {
  local python system="${SYSTEM_PYTHON:-/usr/bin/python3}" real version
  python="$(command -v "$1")"
  # what a venv made from it links to: the interpreter as it names itself (a shim's target)
  real="$("$python" -c 'import sys; print(sys.executable)' 2>/dev/null || echo "$python")"
  version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
  if [ "$(id -u)" = 0 ] && [ -x "$system" ] && command -v runuser >/dev/null \
     && ! runuser -u nobody -- "$real" -c pass >/dev/null 2>&1 \
     && runuser -u nobody -- "$system" -c pass >/dev/null 2>&1 \
     && version="$(version "$python")" && [ "$(version "$system")" = "$version" ]; then
    say "$python cannot be run by other accounts: the venv is made from $system (Python $version too), which every account can run" >&2
    echo "$system"
  else
    echo "$1"
  fi
}

# has_nvidia_gpu: an NVIDIA driver is on this machine (nvidia-smi, or the kernel module's /proc entry;
# NVIDIA_DRIVER_DIR names another entry, for the tests)
has_nvidia_gpu() { command -v nvidia-smi >/dev/null || [ -e "${NVIDIA_DRIVER_DIR:-/proc/driver/nvidia}" ]; }

# index_answers URL: the package index at URL lists torch within 5 s ($PY: a python; proxy settings apply)
index_answers() {
  "$PY" - "$1" >/dev/null 2>&1 <<'PYEOF'
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5).read(1)
PYEOF
}

# choose_torch_index CPU_INDEX: where torch comes from, said in one line. TORCH_INDEX_URL, when set, is
# kept; otherwise, on a machine without an NVIDIA GPU, TORCH_INDEX_URL becomes CPU_INDEX (PyTorch's
# CPU-only wheels) if that index answers; else torch comes from pip's configured indexes, as before.
choose_torch_index() {
  local cpu_index="$1"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    say "torch from TORCH_INDEX_URL=$TORCH_INDEX_URL"
  elif has_nvidia_gpu; then
    say "an NVIDIA GPU is here: torch from pip's configured indexes"
  elif index_answers "$cpu_index"; then
    TORCH_INDEX_URL="$cpu_index"
    say "no NVIDIA GPU: torch from PyTorch's CPU-only index ($cpu_index) alone"
  else
    say "PyTorch's CPU-only index ($cpu_index) did not answer: torch comes from pip's configured indexes, as before"
  fi
}

# cuda_wheels REQUIREMENT: the CUDA library wheels that pip would install with REQUIREMENT from its
# configured indexes (a dry run; nothing if pip cannot tell)
cuda_wheels() {
  local report
  report="$(mktemp)"
  if pip_q install --dry-run --report "$report" "$1" >/dev/null 2>&1; then
    "$PY" - "$report" <<'PYEOF' || true
import json, sys
names = [i["metadata"]["name"] for i in json.load(open(sys.argv[1])).get("install", [])]
print(" ".join(sorted(n for n in names if n.lower().startswith(("nvidia-", "triton", "cuda-")))))
PYEOF
  fi
  rm -f "$report"
}
