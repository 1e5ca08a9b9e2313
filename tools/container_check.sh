#!/usr/bin/env bash
# Build container/Containerfile with Podman and smoke-test the image (`make container-check`, as
# root; not part of `make test`: a cold build installs ~1 GB and compiles Horovod).
# Inside the image: `make check` (Horovod's build report, 2 ranks under Gloo and MPI, TensorFlow and
# PyTorch) and lesson 03 executed on 2 MPI engines. Prints the time of each step and the image size.
#
# No container registry is reachable from the course's machine, so the base image is made here:
# a Debian 12 root file system from Debian's packages (debootstrap), imported with `podman import`
# (a laptop with a registry uses debian:12 itself). Inside this sandbox Podman needs three settings
# that a laptop does not: runc (crun 1.8 refuses the hybrid cgroup layout), and file and process
# limits no higher than the sandbox's (it may not raise them: no CAP_SYS_RESOURCE).
#   CONTAINER_BASE    base image to use instead (default: made with debootstrap as above)
#   DEBIAN_MIRROR     Debian mirror for debootstrap (default: the first one in this machine's apt sources)
#   REUSE_WHEELS=1    mount this machine's Horovod wheel cache into the build (no compilation when the
#                     key matches: same Python minor version and MPI)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="localhost/hvdcourse:check"
BASE_IMAGE="${CONTAINER_BASE:-localhost/hvdcourse-base:bookworm}"
die() { echo "container-check: ERROR: $*" >&2; exit 1; }
say() { echo "container-check: $*"; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, podman import). Run: sudo make container-check"
need=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ "${#need[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || die "missing ${need[*]}: install them"
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
    || die "could not install ${need[*]} (apt-get install ${need[*]})"
fi
# this sandbox's limits (see above); a laptop needs none of these flags
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096")
pod=(podman --runtime runc)

t0=$(date +%s)
if ! podman image exists "$BASE_IMAGE"; then
  [ -z "${CONTAINER_BASE:-}" ] || die "base image $BASE_IMAGE not found"
  first_mirror() {
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
      | grep -oE '^(URIs: *|deb +)https?://[^ ]*/debian/?( |$)' | head -1 | sed -E 's/^(URIs: *|deb +)//; s/ *$//' || true
  }
  MIRROR="${DEBIAN_MIRROR:-$(first_mirror)}"
  [ -n "$MIRROR" ] || die "no Debian mirror found in /etc/apt/sources.list*: set DEBIAN_MIRROR=<mirror URL>/debian"
  rootfs="$(mktemp -d /var/tmp/hvdcourse-base.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  say "making the base image $BASE_IMAGE: Debian 12 with debootstrap"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$MIRROR" >/dev/null \
    || die "debootstrap failed (see $rootfs/debootstrap/debootstrap.log)"
  tar -C "$rootfs" -c . | podman import - "$BASE_IMAGE" >/dev/null
fi
t_base=$(( $(date +%s) - t0 ))

# The build reaches the package registries the way this machine does: its pip and npm settings, and
# the local files they name (CA bundle, wheel folders, constraints), mounted read-only for the build
# only (nothing of it stays in the image).
settings="$(mktemp -d)"
trap 'rm -rf "$settings" "${rootfs:-}"' EXIT
mounts=()
mount_ro() { if [ -e "$1" ]; then mounts+=(-v "$1:$2:ro"); fi; }
python3 -m pip config list 2>/dev/null | sed -E "s/^(global|:env:)\.([^=]+)='(.*)'$/\2 = \3/" \
  | { echo "[global]"; grep -E '^[a-z-]+ = ' | awk '!seen[$1]++' || true; } > "$settings/pip.conf"
mount_ro "$settings/pip.conf" /etc/pip.conf
# (a file:// index "<dir>/simple" links to files beside it: mount <dir>)
while read -r path; do mount_ro "$path" "$path"; done \
  < <(grep -oE '(file://)?/[^ ]+' "$settings/pip.conf" | sed -E 's#^file://##; s#/simple/?$##')
if [ -f /etc/npmrc ]; then
  mount_ro /etc/npmrc /etc/npmrc
  while read -r path; do mount_ro "$path" "$path"; done < <(grep -oE '^cafile=/[^ ]+' /etc/npmrc | cut -d= -f2)
fi
if [ "${REUSE_WHEELS:-0}" = 1 ]; then
  wheels="${HVDCOURSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hvdcourse}/wheels"
  mkdir -p "$wheels" && mounts+=(-v "$wheels:/opt/hvdcourse/cache/wheels")
fi

say "building $IMAGE from container/Containerfile on $BASE_IMAGE"
t1=$(date +%s)
"${pod[@]}" build --network host "${limits[@]}" "${mounts[@]}" --build-arg "BASE=$BASE_IMAGE" \
  ${TORCH_INDEX_URL:+--build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"} \
  -f "$ROOT/container/Containerfile" -t "$IMAGE" "$ROOT" || die "the image did not build (see above)"
t_build=$(( $(date +%s) - t1 ))

say "smoke test: make check and lesson 03 on 2 MPI ranks, inside the image"
t2=$(date +%s)
"${pod[@]}" run --rm --network host "${limits[@]}" "$IMAGE" bash -c \
  'make check && python -m hvdcourse.course.book.book_build --execute notebooks/03_allreduce.md && echo LESSON-OK' \
  | tee "$settings/smoke.log" || die "the smoke test failed inside the image (see above)"
grep -q LESSON-OK "$settings/smoke.log" || die "the lesson did not run inside the image (see above)"
t_smoke=$(( $(date +%s) - t2 ))

size="$(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f GB", $1 / 1e9}')"
say "OK: base image ${t_base} s, build ${t_build} s, smoke test ${t_smoke} s; image $IMAGE: $size"
