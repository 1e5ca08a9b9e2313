#!/usr/bin/env bash
# EasyBuild for the install lesson, in its own venv in the course's cache (its recipes are large and it
# needs none of the course's pins), keyed by tools/easybuild_requirements.txt. Only that lesson and its
# test run EasyBuild, so they install it on first use (hvdcourse.course.lessons.eb_lmod.eb_venv calls
# this); `make env` does not. Prints the venv's path last. Idempotent, and safe to run twice at once
# (a lock in the cache).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SETUP_NAME=setup-easybuild
# shellcheck source=tools/setup_lib.sh
source "$ROOT/tools/setup_lib.sh"
EB_REQS="$ROOT/tools/easybuild_requirements.txt"
EB_VENV="$CACHE_DIR/easybuild-$(sha256sum "$EB_REQS" | cut -c1-8)"
mkdir -p "$CACHE_DIR"
exec 9>"$EB_VENV.lock"
flock 9
if [ ! -f "$EB_VENV/.hvdcourse-ready" ]; then
  say "installing EasyBuild into $EB_VENV on first use (once, about 130 MB: its easyconfigs; 1-2 minutes)" >&2
  rm -rf "$EB_VENV"
  "$PYTHON" -m venv "$EB_VENV" || die "could not create a venv for EasyBuild with $PYTHON"
  PY="$EB_VENV/bin/python" pip_q install -r "$EB_REQS" >&2 || \
    die "could not install EasyBuild (pip install -r $EB_REQS, see above); rerun tools/setup_easybuild.sh"
  touch "$EB_VENV/.hvdcourse-ready"
fi
echo "$EB_VENV"
