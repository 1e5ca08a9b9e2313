#!/usr/bin/env bash
# One-command environment for the course (called by `make env`, hence by `make book` / `make test`).
#   1. checks the interpreter (TensorFlow 2.15 supports Python 3.9-3.11 only);
#   2. as root on Debian/Ubuntu, installs the system packages (OpenMPI, compilers, Slurm, munge, browser);
#   3. creates/reuses the virtual environment and installs the pinned requirements;
#   4. compiles Horovod 0.28.1 (TensorFlow + MPI + Gloo) once into a wheel cached OUTSIDE the clone,
#      keyed by the pins, so a second clone or run installs it in seconds.
# Idempotent: a stamp file keyed by the same inputs makes a warm run a no-op.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
HOROVOD_VERSION="0.28.1"
CACHE_DIR="${HVDCOURSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hvdcourse}"
APT_PACKAGES=(build-essential cmake libopenmpi-dev openmpi-bin munge slurm-wlm slurm-wlm-basic-plugins
              graphviz chromium shellcheck procps)

die() { echo "setup: ERROR: $*" >&2; exit 1; }
say() { echo "setup: $*"; }

# 1. Python version ---------------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' found. Install Python 3.11 (3.9-3.11 work) or run: make PYTHON=/path/to/python3.11"
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "$PYVER" in
  3.9|3.10|3.11) ;;
  *) die "Python $PYVER found, but tensorflow-cpu 2.15.1 (the last TensorFlow Horovod 0.28.1 works with) needs Python 3.9-3.11. Install python3.11 and run: make PYTHON=python3.11" ;;
esac

# 2. System packages (root on Debian/Ubuntu only; otherwise just check) -------------------------------
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done 2>/dev/null || true
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  say "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v g++ >/dev/null || die "no C++ compiler. Install one: sudo apt-get install build-essential (or 'module load gcc' on a cluster)"
command -v mpicc >/dev/null && command -v mpirun >/dev/null || \
  die "no MPI found (mpicc/mpirun). Install it: sudo apt-get install libopenmpi-dev openmpi-bin (or 'module load openmpi' on a cluster)"
command -v cmake >/dev/null || die "no cmake. Install it: sudo apt-get install cmake (or pip install cmake)"

# 3. Virtual environment + pinned requirements ---------------------------------------------------------
MPI_ID="$(mpirun --version 2>/dev/null | head -1 | tr -c 'A-Za-z0-9.\n' '_' )"
REQ_HASH="$(cat "$ROOT/requirements.txt" | sha256sum | cut -c1-12)"
KEY="hvd${HOROVOD_VERSION}-py${PYVER}-${MPI_ID}-$(grep -E '^tensorflow-cpu==' "$ROOT/requirements.txt" | cut -d= -f3)"
STAMP="$VENV/.hvdcourse-ready-$REQ_HASH-$KEY"
if [ -f "$STAMP" ]; then
  say "environment up to date ($VENV)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PY="$VENV/bin/python"
# pip, minus the warnings about optional local package folders that some machines configure
pip_q() { "$PY" -m pip -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
pip_q install --upgrade "pip<25" wheel "setuptools<70"
say "installing pinned requirements (first time: a few minutes)"
# mpi4py compiles against the system MPI (it must match the mpirun that runs it). Built without
# isolation (its setup needs setuptools<70) and without debug info (10x less memory and time).
CFLAGS="-g0" pip_q install --no-build-isolation "$(grep -E '^mpi4py==' "$ROOT/requirements.txt")"
pip_q install -r "$ROOT/requirements.txt"
pip_q install --no-deps -e "$ROOT"

# 4. Horovod, compiled once per key and cached as a wheel outside the clone ----------------------------
WHEEL_DIR="$CACHE_DIR/wheels/$KEY"
if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
  say "compiling Horovod $HOROVOD_VERSION with TensorFlow, MPI and Gloo (once, about 5 minutes on 2 cores)"
  mkdir -p "$WHEEL_DIR.tmp"
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS="-j$(nproc)" \
    pip_q wheel --no-cache-dir --no-build-isolation --no-deps \
      -w "$WHEEL_DIR.tmp" "horovod==$HOROVOD_VERSION" \
    || die "Horovod build failed (see above). Check that g++, cmake and the MPI headers (libopenmpi-dev) are installed."
  rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
fi
pip_q install --no-deps --force-reinstall "$WHEEL_DIR"/horovod-*.whl
# horovod's own runtime deps (horovodrun needs them), without touching the pins
pip_q install cloudpickle psutil pyyaml packaging cffi

# (capture first: grep -q would close the pipe early and horovodrun would die of a broken pipe)
BUILD_REPORT="$(TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/horovodrun" --check-build 2>&1)" || true
for feature in TensorFlow MPI Gloo; do
  grep -q "\[X\] $feature" <<<"$BUILD_REPORT" || \
    die "Horovod was built without $feature (horovodrun --check-build). Delete $WHEEL_DIR and rerun 'make env'"
done
touch "$STAMP"
say "environment ready: $VENV (Horovod wheel cache: $WHEEL_DIR)"
