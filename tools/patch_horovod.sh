#!/usr/bin/env bash
# Applies the course's changes to an unpacked Horovod source tree, one patch at a time, and says what
# each one does (the first line of each patch file; the lines below it say why).
#   usage: tools/patch_horovod.sh HOROVOD_SOURCE_DIR [SET...]
#          tools/patch_horovod.sh --list VERSION [SET...]     only print the patches, in order
# The patches live in patches/horovod-<version>/ and are applied in name order; then those of each
# SET, a subfolder of it (gpu: the GPU route's, tools/setup_gpu.sh). The CPU build (tools/setup_env.sh)
# applies and hashes the top folder only, so a SET never changes its wheel. A tree that already has
# a patch is left as it is (so the script can be rerun on the same tree).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# patch_files VERSION [SET...]: the patch files, in the order they are applied
patch_files() {
  local dir="$ROOT/patches/horovod-$1" set
  shift
  [ -d "$dir" ] || { echo "patch_horovod: ERROR: no patches for Horovod ${dir##*-} in $ROOT/patches" >&2; exit 1; }
  ls "$dir"/*.patch
  for set in "$@"; do
    ls "$dir/$set"/*.patch 2>/dev/null || { echo "patch_horovod: ERROR: no patch set '$set' in $dir" >&2; exit 1; }
  done
}

if [ "${1:-}" = --list ]; then
  version="${2:?usage: tools/patch_horovod.sh --list VERSION [SET...]}"
  shift 2
  files="$(patch_files "$version" "$@")"
  while read -r file; do echo "${file#"$ROOT"/}: $(head -1 "$file")"; done <<< "$files"
  exit 0
fi

SRC="${1:?usage: tools/patch_horovod.sh HOROVOD_SOURCE_DIR [SET...]}"
shift
[ -f "$SRC/setup.py" ] || { echo "patch_horovod: ERROR: $SRC is not an unpacked Horovod source tree" >&2; exit 1; }
VERSION="$(sed -n 's/^__version__ = .\([0-9.]*\).*/\1/p' "$SRC/horovod/__init__.py")"
command -v patch >/dev/null || { echo "patch_horovod: ERROR: no 'patch' command. Install it: sudo apt-get install patch" >&2; exit 1; }
files="$(patch_files "$VERSION" "$@")"
while read -r file; do
  name="${file#"$ROOT/patches/horovod-$VERSION/"}"
  if patch -d "$SRC" -p1 --dry-run --reverse --force --quiet < "$file" >/dev/null 2>&1; then
    echo "patch_horovod: already applied: $name: $(head -1 "$file")"
  elif patch -d "$SRC" -p1 --forward --quiet < "$file"; then
    echo "patch_horovod: applied $name: $(head -1 "$file")"
  else
    echo "patch_horovod: ERROR: $name does not apply to $SRC" >&2; exit 1
  fi
done <<< "$files"
