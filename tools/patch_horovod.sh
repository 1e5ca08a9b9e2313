#!/usr/bin/env bash
# Applies the course's changes to an unpacked Horovod source tree, one patch at a time, and says what
# each one does (the first line of each patch file; the lines below it say why).
#   usage: tools/patch_horovod.sh HOROVOD_SOURCE_DIR
# The patches live in patches/horovod-<version>/ and are applied in name order. A tree that already
# has a patch is left as it is (so the script can be rerun on the same tree).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="${1:?usage: tools/patch_horovod.sh HOROVOD_SOURCE_DIR}"
[ -f "$SRC/setup.py" ] || { echo "patch_horovod: ERROR: $SRC is not an unpacked Horovod source tree" >&2; exit 1; }
VERSION="$(sed -n 's/^__version__ = .\([0-9.]*\).*/\1/p' "$SRC/horovod/__init__.py")"
PATCH_DIR="$ROOT/patches/horovod-$VERSION"
[ -d "$PATCH_DIR" ] || { echo "patch_horovod: ERROR: no patches for Horovod $VERSION in $ROOT/patches" >&2; exit 1; }
command -v patch >/dev/null || { echo "patch_horovod: ERROR: no 'patch' command. Install it: sudo apt-get install patch" >&2; exit 1; }
for file in "$PATCH_DIR"/*.patch; do
  if patch -d "$SRC" -p1 --dry-run --reverse --force --quiet < "$file" >/dev/null 2>&1; then
    echo "patch_horovod: already applied: $(basename "$file"): $(head -1 "$file")"
  elif patch -d "$SRC" -p1 --forward --quiet < "$file"; then
    echo "patch_horovod: applied $(basename "$file"): $(head -1 "$file")"
  else
    echo "patch_horovod: ERROR: $(basename "$file") does not apply to $SRC" >&2; exit 1
  fi
done
