#!/usr/bin/env bash
# Build container/Containerfile with Podman and smoke-test the image (`make container-check`, as
# root; `tests/project/test_container.py` runs it in `make test`).
#
# The image is the course environment, keyed like the Horovod wheel: localhost/hvdcourse:env-<key>,
# where the key hashes what `make env` inside it depends on (the Containerfile, the set-up scripts,
# the pins, the Horovod patches, the base image). A cold build took 8 minutes on 2 quiet cores; with
# the key unchanged the image is reused, so a change to lessons or code costs only the smoke test.
# The smoke test runs on a copy of this checkout mounted at /work (as a learner runs their clone:
# README, "Containers"), not on the course copy the image was built with: `make check` (Horovod's
# build report, 2 ranks under Gloo and MPI, TensorFlow and PyTorch) and lesson 03 executed on 2 MPI
# engines; then the image's own command, JupyterLab, on its port behind a token. Prints the time of
# each step and the image size; removes its containers and the copy on exit.
#
# No container registry is reachable from the course's machine, so the base image is made here:
# a Debian 12 root file system from Debian's packages (debootstrap), imported with `podman import`
# (a laptop with a registry uses debian:12 itself). Inside this sandbox Podman needs three settings
# that a laptop does not: runc (crun 1.8 refuses the hybrid cgroup layout), and file and process
# limits no higher than the sandbox's (it may not raise them: no CAP_SYS_RESOURCE).
#   CONTAINER_BASE    base image to use instead (default: made with debootstrap as above)
#   DEBIAN_MIRROR     Debian mirror for debootstrap (default: the first one in this machine's apt sources)
#   REUSE_WHEELS=0    do not mount this machine's Horovod wheel cache into the build (by default it is:
#                     no compilation when the key matches, same Python minor version and MPI)
#   BUILD_TIMEOUT     seconds the image build may take (default 3600)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SETUP_NAME="container-check"
# die, say, patch_hash, install_inputs (the same inputs as the set-up's own stamp and wheel key)
# shellcheck source=tools/setup_lib.sh
source "$ROOT/tools/setup_lib.sh"
BASE_IMAGE="${CONTAINER_BASE:-localhost/hvdcourse-base:bookworm}"

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

# env_key: what the image's `make env` depends on; code, lessons and data are not in it
env_key() {
  {
    cat "$ROOT/container/Containerfile" "$ROOT/tools/setup_env.sh" "$ROOT/tools/setup_lib.sh"
    install_inputs
    # shellcheck disable=SC2119  # (no set: the CPU build's patches, as in setup_env.sh)
    patch_hash
    podman image inspect --format '{{.Id}}' "$BASE_IMAGE"
  } | sha256sum | cut -c1-12
}
IMAGE="localhost/hvdcourse:env-$(env_key)"
scratch="$(mktemp -d)"
container="hvdcourse-smoke-$$"
cleanup() {
  podman rm -f --ignore "$container" "$container-lab" >/dev/null 2>&1 || true
  rm -rf "$scratch" "${rootfs:-}"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

t1=$(date +%s)
if podman image exists "$IMAGE"; then
  say "reusing $IMAGE (the set-up's inputs are unchanged since it was built)"
else
  # The build reaches the package registries the way this machine does: its pip and npm settings,
  # and the local files they name (CA bundle, wheel folders, constraints), mounted read-only for the
  # build only (nothing of it stays in the image).
  mounts=()
  mount_ro() { if [ -e "$1" ]; then mounts+=(-v "$1:$2:ro"); fi; }
  python3 -m pip config list 2>/dev/null | sed -E "s/^(global|:env:)\.([^=]+)='(.*)'$/\2 = \3/" \
    | { echo "[global]"; grep -E '^[a-z-]+ = ' | awk '!seen[$1]++' || true; } > "$scratch/pip.conf"
  mount_ro "$scratch/pip.conf" /etc/pip.conf
  # (a file:// index "<dir>/simple" links to files beside it: mount <dir>)
  while read -r path; do mount_ro "$path" "$path"; done \
    < <(grep -oE '(file://)?/[^ ]+' "$scratch/pip.conf" | sed -E 's#^file://##; s#/simple/?$##')
  if [ -f /etc/npmrc ]; then
    mount_ro /etc/npmrc /etc/npmrc
    while read -r path; do mount_ro "$path" "$path"; done < <(grep -oE '^cafile=/[^ ]+' /etc/npmrc | cut -d= -f2)
  fi
  if [ "${REUSE_WHEELS:-1}" = 1 ]; then
    mkdir -p "$CACHE_DIR/wheels" && mounts+=(-v "$CACHE_DIR/wheels:/opt/hvdcourse/cache/wheels")
  fi
  say "building $IMAGE from container/Containerfile on $BASE_IMAGE (first time for these inputs: 8 min on a quiet 2-core machine, 30 at load 20-30)"
  # Podman 4.3 has been seen to sit for minutes after "Successfully tagged": once the tag exists and
  # the build says so, it is stopped (the image is complete then)
  "${pod[@]}" build --network host "${limits[@]}" "${mounts[@]}" --build-arg "BASE=$BASE_IMAGE" \
    ${TORCH_INDEX_URL:+--build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL"} \
    -f "$ROOT/container/Containerfile" -t "$IMAGE" "$ROOT" > >(tee "$scratch/build.log") 2>&1 &
  build=$!
  deadline=$(( $(date +%s) + ${BUILD_TIMEOUT:-3600} ))
  while kill -0 "$build" 2>/dev/null; do
    if grep -q "^Successfully tagged $IMAGE" "$scratch/build.log" && podman image exists "$IMAGE"; then
      for _ in $(seq 30); do kill -0 "$build" 2>/dev/null || break; sleep 1; done
      kill "$build" 2>/dev/null || true; break
    fi
    [ "$(date +%s)" -lt "$deadline" ] || { kill "$build"; die "the image build took over ${BUILD_TIMEOUT:-3600} s (stopped)"; }
    sleep 5
  done
  wait "$build" 2>/dev/null || true
  podman image exists "$IMAGE" || die "the image did not build (see above)"
  # the environment images of older inputs: 6-7 GB each
  podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/hvdcourse:(env-|check$)' \
    | grep -vxF "$IMAGE" | xargs -r podman rmi -f >/dev/null 2>&1 || true
fi
podman tag "$IMAGE" localhost/hvdcourse:latest
t_build=$(( $(date +%s) - t1 ))

say "smoke test inside the image, on a copy of this checkout: make check, lesson 03 on 2 MPI ranks"
t2=$(date +%s)
mkdir "$scratch/course"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  # tracked and new files, not what git ignores (venv, builds): what `podman build` would copy
  git -C "$ROOT" ls-files -z -co --exclude-standard | (cd "$ROOT" && tar --null -T - -c) | tar -x -C "$scratch/course"
else
  tar -C "$ROOT" --exclude=.venv --exclude=_build -c . | tar -x -C "$scratch/course"
fi
"${pod[@]}" run --rm --name "$container" --network host "${limits[@]}" -v "$scratch/course:/work" -w /work \
  "$IMAGE" bash -c \
  'make check && python -m hvdcourse.course.book.book_build --execute notebooks/03_allreduce.md && echo LESSON-OK' \
  2>&1 | tee "$scratch/smoke.log" || die "the smoke test failed inside the image (see above)"
grep -q LESSON-OK "$scratch/smoke.log" || die "the lesson did not run inside the image (see above)"

# The image's own command, as a laptop runs it: JupyterLab on the exposed port, behind a token
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
"${pod[@]}" run -d --rm --name "$container-lab" "${limits[@]}" -p "127.0.0.1:$port:8888" \
  -e "JUPYTER_TOKEN=$token" "$IMAGE" >/dev/null || die "the image's command (make lab) did not start"
code=000
for _ in $(seq 60); do
  code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/lab?token=$token" || true)"
  [ "$code" != 200 ] || break
  sleep 2
done
[ "$code" = 200 ] || { podman logs "$container-lab" 2>&1 | tail -20; die "JupyterLab in the image did not answer on port 8888 within 120 s (HTTP $code)"; }
kernel="$(curl -s "http://127.0.0.1:$port/api/kernelspecs?token=$token" \
  | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["kernelspecs"][d["default"]]["spec"]["argv"][0])')"
[ "$kernel" = /opt/hvdcourse/venv/bin/python ] || die "the lab's kernel runs $kernel, not the course venv's Python"
denied="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/kernelspecs")"
[ "$denied" = 403 ] || die "JupyterLab in the image answered HTTP $denied without the token (403 expected)"
podman stop -t 20 "$container-lab" >/dev/null
say "lab: the image's command serves JupyterLab on port 8888 (HTTP 200 with the token, 403 without), kernel $kernel"
t_smoke=$(( $(date +%s) - t2 ))

size="$(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f GB", $1 / 1e9}')"
say "OK: base image ${t_base} s, build ${t_build} s, smoke test ${t_smoke} s; image $IMAGE: $size"
