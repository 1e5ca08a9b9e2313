#!/usr/bin/env bash
# The GPU route (`make gpu`; lesson: Installing Horovod): Horovod 0.28.1 with PyTorch and NCCL, built on
# a Linux machine with an NVIDIA GPU, a CUDA toolkit and a CUDA build of PyTorch, into a virtual
# environment of its own (GPU_VENV, default .venv-gpu: the course's .venv keeps its CPU build with
# TensorFlow). Then `hvdcourse-check --gpu` checks it on the GPU(s).
#   tools/setup_gpu.sh                 detect, build once (cached wheel), install, check-build
#   tools/setup_gpu.sh --dry-run       (or GPU_DRY_RUN=1) print what is missing, the exact build
#                                      variables, the patches and the wheel's cache key; build nothing
#   tools/setup_gpu.sh --print-vars    only the build variables, one NAME=value a line (slurm/lib.sh's
#                                      dry runs of the GPU sites print them)
# Inputs (environment): CUDA_HOME (else HOROVOD_CUDA_HOME, the nvcc in PATH, /usr/local/cuda);
# NCCL_HOME, a site's NCCL with include/nccl.h and lib/libnccl.so* (default: the NCCL that PyTorch's
# wheel brings, package nvidia-nccl-cu*); HOROVOD_BUILD_CUDA_CC_LIST (default: the GPUs' compute
# capabilities from nvidia-smi, e.g. 90 for an H100); GPU_VENV; PYTHON (makes GPU_VENV when missing).
#
# What the build needs beyond the CPU build's patches, each seen failing on an H100 (CUDA 13.0, gcc 13,
# CMake 4, torch 2.11; ../shared/ENVIRONMENT.md, "GPU route") - where each change lives:
#   C++17 for Horovod and its torch op ........ patches/horovod-0.28.1/01-cxx17.patch (CPU build's too)
#   missing standard headers under gcc 13 ..... patches/horovod-0.28.1/06-gcc13-14.patch (CPU build's too:
#                                               the probe's errors in group_table.h and common.h)
#   C++17 for the CUDA kernels (CUDA 13) ...... patches/horovod-0.28.1/gpu/01-cuda-cxx17.patch (GPU only:
#                                               not in the CPU build's patch hash, so its wheel is unchanged)
#   CMAKE_POLICY_VERSION_MINIMUM=3.5 .......... here, a build variable: CMake 4 refuses the bundled Gloo's
#                                               cmake_minimum_required(VERSION 2.8.12); older CMake ignores it
#   cffi importable at build time ............. here: pip install cffi (setup.py otherwise fetches it)
#   an unversioned libnccl.so ................. here: a link in the cache's nccl/ folder (torch's NCCL
#                                               wheel has only libnccl.so.2; site-packages is left alone)
# The wheel is cached outside the clone by a key with Horovod, Python, torch, CUDA, NCCL, the compute
# capabilities, MPI and the patches (CPU's + gpu/), so a second run installs it in seconds.
# What is missing (no GPU, no nvcc, no NCCL headers, a CPU build of torch) is said in one line each;
# the script then exits with status 2.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SETUP_NAME=setup-gpu
# HOROVOD_VERSION, CACHE_DIR, die, say, patch_hash, mpi_id, pip_q, build_horovod_wheel (shared with setup_env.sh)
# shellcheck source=tools/setup_lib.sh
source "$ROOT/tools/setup_lib.sh"
PATCH_SETS=(gpu)
VENV="${GPU_VENV:-$ROOT/.venv-gpu}"
PYTHON="${PYTHON:-python3}"
MODE=build
case "${1:-}" in
  --dry-run) MODE=dry-run ;;
  --print-vars) MODE=print-vars ;;
  "") [ "${GPU_DRY_RUN:-0}" = 0 ] || MODE=dry-run ;;
  *) echo "usage: tools/setup_gpu.sh [--dry-run | --print-vars]" >&2; exit 2 ;;
esac

MISSING=()  # one line each
missing() { MISSING+=("$*"); }

# 1. What this machine has ----------------------------------------------------------------------------
[ "$(uname -s)" = Linux ] || missing "not Linux ($(uname -s)): the GPU route builds Horovod on Linux with an NVIDIA GPU only"

GPU_LIST="" CC_FOUND=""
if ! command -v nvidia-smi >/dev/null; then
  missing "no NVIDIA GPU: nvidia-smi not found (run this on a GPU node, e.g. srun --gpus=1 make gpu, or install the NVIDIA driver)"
else
  GPU_LIST="$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>/dev/null || true)"
  if [ -z "$GPU_LIST" ]; then
    missing "no NVIDIA GPU: nvidia-smi lists no device (check 'nvidia-smi'; on a cluster ask for one: srun --gpus=1 make gpu)"
  else
    CC_FOUND="$(cut -d, -f2 <<<"$GPU_LIST" | tr -d ' .' | sort -u | paste -sd, -)"
  fi
fi

# CUDA_HOME, HOROVOD_CUDA_HOME, /usr/local/cuda (Horovod's default), the toolkit of the nvcc in PATH
CUDA_DIR="${CUDA_HOME:-${HOROVOD_CUDA_HOME:-}}"
[ -n "$CUDA_DIR" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || CUDA_DIR=/usr/local/cuda
if [ -z "$CUDA_DIR" ] && command -v nvcc >/dev/null; then
  CUDA_DIR="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  [ -f "$CUDA_DIR/include/cuda.h" ] || CUDA_DIR=""  # a wrapper script: say CUDA_HOME instead
fi
CUDA_VERSION=""
if [ -n "$CUDA_DIR" ] && [ -x "$CUDA_DIR/bin/nvcc" ]; then
  CUDA_VERSION="$("$CUDA_DIR/bin/nvcc" --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')"
elif [ -n "$CUDA_DIR" ]; then
  missing "no CUDA toolkit: $CUDA_DIR/bin/nvcc not found (set CUDA_HOME to the toolkit's folder, or 'module load cuda')"
else
  missing "no CUDA toolkit: no nvcc in PATH, CUDA_HOME not set, no /usr/local/cuda/bin/nvcc ('module load cuda', or CUDA_HOME=/path/to/cuda)"
fi

# PyTorch and its NCCL, read from the installed files (importing torch takes seconds; not needed here)
PY="$VENV/bin/python"
[ -x "$PY" ] || PY="$(command -v "$PYTHON" || true)"
TORCH_INFO=""
[ -z "$PY" ] || TORCH_INFO="$("$PY" - <<'EOF' 2>/dev/null || true
import importlib.util, os, re, sys
spec = importlib.util.find_spec("torch")
if spec is None:
    print("none")
    sys.exit()
text = open(os.path.join(spec.submodule_search_locations[0], "version.py")).read()
version = re.search(r"__version__\s*=\s*'([^']+)'", text) or re.search(r'__version__\s*=\s*"([^"]+)"', text)
cuda = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", text, re.M)
try:
    nccl = importlib.util.find_spec("nvidia.nccl")
except ModuleNotFoundError:
    nccl = None
nccl_dir = list(nccl.submodule_search_locations)[0] if nccl and nccl.submodule_search_locations else ""
print("%d.%d" % sys.version_info[:2], version.group(1) if version else "?", cuda.group(1) if cuda else "cpu", nccl_dir or "-")
EOF
)"
read -r PYVER TORCH_VERSION TORCH_CUDA TORCH_NCCL_DIR <<<"${TORCH_INFO:-none}" || true  # TORCH_CUDA: "cpu" for a CPU build
if [ -z "$PY" ]; then
  missing "no '$PYTHON' found: set PYTHON to a Python 3.10-3.13 that has a CUDA build of PyTorch, or GPU_VENV to a venv with one"
elif [ "${PYVER:-none}" = none ]; then
  missing "no PyTorch for $PY: install a CUDA build first (pip install torch: the registry's Linux x86_64 wheels are CUDA builds and bring NCCL), or set GPU_VENV to a venv that has one"
elif [ "$TORCH_CUDA" = cpu ]; then
  missing "PyTorch $TORCH_VERSION for $PY is a CPU build (torch.version.cuda is None): install a CUDA build (pip install torch==${TORCH_VERSION%%+*} from the registry, or PyTorch's cu* index), or set GPU_VENV to a venv that has one"
elif [ -n "$CUDA_VERSION" ] && [ "${TORCH_CUDA%%.*}" != "${CUDA_VERSION%%.*}" ]; then
  missing "PyTorch $TORCH_VERSION is built for CUDA $TORCH_CUDA but the toolkit at $CUDA_DIR is CUDA $CUDA_VERSION: use a toolkit of the same major version (CUDA_HOME=..., 'module load cuda/${TORCH_CUDA%%.*}')"
fi

# NCCL: the site's (NCCL_HOME) or torch's wheel's
NCCL_DIR="${NCCL_HOME:-}" NCCL_FROM="NCCL_HOME"
if [ -z "$NCCL_DIR" ] && [ "${TORCH_NCCL_DIR:--}" != - ]; then NCCL_DIR="$TORCH_NCCL_DIR" NCCL_FROM="torch's nvidia-nccl-cu* package"; fi
NCCL_VERSION=""
if [ -n "$NCCL_DIR" ] && [ -f "$NCCL_DIR/include/nccl.h" ]; then
  NCCL_VERSION="$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v[$2]=$3} END{print v["NCCL_MAJOR"]"."v["NCCL_MINOR"]"."v["NCCL_PATCH"]}' "$NCCL_DIR/include/nccl.h")"
  ls "$NCCL_DIR"/lib/libnccl.so* >/dev/null 2>&1 || missing "no NCCL library: $NCCL_DIR/lib has no libnccl.so* ($NCCL_FROM)"
elif [ -n "$NCCL_DIR" ]; then
  missing "no NCCL headers: $NCCL_DIR/include/nccl.h not found ($NCCL_FROM; a site's NCCL: NCCL_HOME=<folder with include/ and lib/>)"
else
  missing "no NCCL headers: NCCL_HOME is not set and PyTorch brings no nvidia-nccl-cu* package (set NCCL_HOME=<folder with include/nccl.h and lib/>, e.g. the nccl module's)"
fi

command -v g++ >/dev/null || missing "no C++ compiler: sudo apt-get install build-essential (or 'module load gcc')"
command -v cmake >/dev/null || [ -x "$VENV/bin/cmake" ] || missing "no cmake: pip install cmake (or 'module load cmake')"

# 2. The build variables: the same lines for --dry-run, --print-vars and the build -----------------------
if command -v mpicc >/dev/null; then MPI_VAR=HOROVOD_WITH_MPI MPI_KEY="$(mpi_id)"; else MPI_VAR=HOROVOD_WITHOUT_MPI MPI_KEY=nompi; fi
# torch's wheel has only libnccl.so.2: the linker needs libnccl.so, made here, outside site-packages
NCCL_LIB_DIR="${NCCL_DIR:+$NCCL_DIR/lib}"
if [ -n "$NCCL_VERSION" ] && [ ! -e "$NCCL_DIR/lib/libnccl.so" ]; then
  NCCL_LIB_DIR="$CACHE_DIR/nccl/$NCCL_VERSION-$(printf %s "$NCCL_DIR" | sha256sum | cut -c1-8)/lib"
fi
CC_LIST="${HOROVOD_BUILD_CUDA_CC_LIST:-$CC_FOUND}"
BUILD_VARS=(
  HOROVOD_GPU_OPERATIONS=NCCL                     # allreduce, allgather, broadcast of GPU tensors with NCCL
  "HOROVOD_CUDA_HOME=${CUDA_DIR:-<CUDA_HOME>}"
  "HOROVOD_NCCL_INCLUDE=${NCCL_DIR:-<NCCL_HOME>}/include"
  "HOROVOD_NCCL_LIB=${NCCL_LIB_DIR:-<NCCL_HOME>/lib}"
  HOROVOD_NCCL_LINK=SHARED                        # the libnccl.so.2 that torch loads too
  "HOROVOD_BUILD_CUDA_CC_LIST=${CC_LIST:-<compute_cap>}"
  HOROVOD_WITH_PYTORCH=1                          # fail instead of silently leaving PyTorch out
  HOROVOD_WITHOUT_TENSORFLOW=1                    # the GPU route is PyTorch's (ENVIRONMENT, "GPU route")
  HOROVOD_WITHOUT_MXNET=1
  HOROVOD_WITH_GLOO=1
  "$MPI_VAR=1"                                    # MPI when mpicc is here
  CMAKE_POLICY_VERSION_MINIMUM=3.5                # CMake 4 and the bundled Gloo (see the table above)
  "MAKEFLAGS=-j$(nproc)"
)
KEY="hvd${HOROVOD_VERSION}-gpu-py${PYVER:-?}-torch${TORCH_VERSION:-?}-cuda${CUDA_VERSION:-?}-nccl${NCCL_VERSION:-?}-cc${CC_LIST:-?}-${MPI_KEY:-mpi}-patches$(patch_hash "${PATCH_SETS[@]}")"
KEY="${KEY//[^A-Za-z0-9._+,-]/_}"
WHEEL_DIR="$CACHE_DIR/wheels/$KEY"

if [ "$MODE" = print-vars ]; then
  printf '%s\n' "${BUILD_VARS[@]}"
  exit 0
fi
if [ "$MODE" = dry-run ]; then
  say "dry run: nothing is built"
  for line in "${MISSING[@]}"; do say "missing: $line"; done
  say "GPU(s): ${GPU_LIST:-none}; CUDA ${CUDA_VERSION:-?} at ${CUDA_DIR:-?}; PyTorch ${TORCH_VERSION:-?} (CUDA ${TORCH_CUDA:-?}); NCCL ${NCCL_VERSION:-?}${NCCL_DIR:+ from $NCCL_FROM ($NCCL_DIR)}"
  echo "build variables:"
  printf '  %s\n' "${BUILD_VARS[@]}"
  echo "patches (tools/patch_horovod.sh SRC ${PATCH_SETS[*]}):"
  bash "$ROOT/tools/patch_horovod.sh" --list "$HOROVOD_VERSION" "${PATCH_SETS[@]}" | sed 's/^/  /'
  echo "wheel cache: $WHEEL_DIR"
  exit 0
fi
if [ "${#MISSING[@]}" -gt 0 ]; then
  for line in "${MISSING[@]}"; do echo "$SETUP_NAME: $line" >&2; done
  exit 2
fi

# 3. The venv (with the machine's packages visible: a CUDA torch preinstalled there is used as it is) --
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV (with the system's site-packages, where PyTorch $TORCH_VERSION is)"
  "$PY" -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"
# cffi: Horovod's setup.py imports it for the PyTorch extension and otherwise fetches it at build time
pip_q install wheel "setuptools==80.9.0" cffi pyyaml packaging
# what horovodrun and hvdcourse-check --gpu need, at the course's pins (torch stays the machine's)
mapfile -t PINS < <(grep -E '^(numpy|pandas|psutil|cloudpickle)==' "$ROOT/requirements.txt")
pip_q install "${PINS[@]}"
command -v cmake >/dev/null || [ -x "$VENV/bin/cmake" ] || pip_q install cmake
pip_q install --no-deps -e "$ROOT"

# 4. Horovod, compiled once per key ------------------------------------------------------------------------
if [ "$NCCL_LIB_DIR" != "$NCCL_DIR/lib" ]; then
  mkdir -p "$NCCL_LIB_DIR"
  NCCL_SO=("$NCCL_DIR"/lib/libnccl.so.*)
  ln -sfn "${NCCL_SO[0]}" "$NCCL_LIB_DIR/libnccl.so"
fi
if ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
  say "compiling Horovod $HOROVOD_VERSION with PyTorch $TORCH_VERSION, CUDA $CUDA_VERSION, NCCL $NCCL_VERSION (once; about 2 minutes on 16 cores)"
  started=$SECONDS
  ( export "${BUILD_VARS[@]}" PATH="$VENV/bin:$PATH"
    build_horovod_wheel "$WHEEL_DIR" "Check CUDA_HOME ($CUDA_DIR), NCCL ($NCCL_DIR) and that g++ suits this CUDA." "${PATCH_SETS[@]}" ) || exit 1
  # read by hvdcourse-check --gpu for its record
  printf '{"seconds": %d, "cuda": "%s", "nccl": "%s", "cuda_cc": "%s", "nproc": %d, "key": "%s"}\n' \
    "$((SECONDS - started))" "$CUDA_VERSION" "$NCCL_VERSION" "$CC_LIST" "$(nproc)" "$KEY" > "$WHEEL_DIR/build.json"
  say "built in $((SECONDS - started)) s: $WHEEL_DIR"
fi
pip_q install --no-deps --force-reinstall "$WHEEL_DIR"/horovod-*.whl

BUILD_REPORT="$("$VENV/bin/horovodrun" --check-build 2>&1)" || true
for feature in PyTorch NCCL Gloo; do
  grep -q "\[X\] $feature" <<<"$BUILD_REPORT" || \
    die "Horovod was built without $feature (horovodrun --check-build). Delete $WHEEL_DIR and rerun 'make gpu'"
done
say "GPU route ready: $VENV (Horovod wheel cache: $WHEEL_DIR). Check it: $VENV/bin/hvdcourse-check --gpu"
