#!/usr/bin/env bash
# A container engine and a local test image for the container executor's tests (tests/plans/test_container_engine.py).
#   bash scripts/container-engine.sh [--no-install] [--mounts] [--venv DIR] [--src DIR]
# 1. podman (with runc and debootstrap) from the system's apt sources when it is missing and this runs as root
#    (--no-install: never install; the engine must be there);
# 2. /etc/containers/containers.conf when the machine has none: runc (crun refuses hybrid cgroup v1/v2 hosts),
#    cgroupfs, and file limits no higher than this shell's hard limits (podman's defaults need CAP_SYS_RESOURCE);
# 3. the image localhost/lmmbench-test:<hash>, built without any registry (no image can be pulled here): a Debian
#    root filesystem (debootstrap --variant=minbase from the mirror of the apt sources, cached as
#    ~/.cache/lmmbench-containers/rootfs-<suite>.tar) with a venv at /opt/lmmbench layered on the venv DIR (default
#    .venv) and the sources DIR (default src): its python sees their packages once they are mounted read-only at
#    the same paths (the tests do), and installs requirements into its own writable site-packages. uv is on its
#    PATH when DIR has it. Rebuilt only when missing (a lock keeps parallel callers, and the background build of
#    scripts/setup.sh --dev, to one build).
# The last line printed is the image's name; with --mounts, the host folders a row of that image mounts read-only
# (the venv, the sources, the base interpreter, the folders on their sys.path), one per line, instead.
# Exit 3 with one line on stderr when no engine can run here.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL=1 VENV=.venv SRC=src SUITE=bookworm PRINT_MOUNTS=0
while [ $# -gt 0 ]; do
  case $1 in
    --no-install) INSTALL=0; shift ;;
    --mounts) PRINT_MOUNTS=1; shift ;;
    --venv) VENV=$2; shift 2 ;;
    --src) SRC=$2; shift 2 ;;
    *) echo "container-engine: unknown argument $1" >&2; exit 2 ;;
  esac
done
fail() { echo "container-engine: $*" >&2; exit 3; }
# Not under $HOME or $LMMBENCH_HOME: each test session and the docs leg have their own.
HOME_DIR=${LMMBENCH_CONTAINER_CACHE:-/var/tmp/lmmbench-containers-$(id -u)}
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/build.lock"
flock 9  # held to the end: a caller waits for a build (or an install) under way

if ! command -v podman >/dev/null 2>&1; then
  [ "$INSTALL" = 1 ] || fail "podman is not installed (bash scripts/container-engine.sh installs it as root)"
  { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; } ||
    fail "podman is not installed and apt-get as root is not available: install podman to run these tests"
  echo "container-engine: installing podman, runc, debootstrap with apt-get" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null; } ||
    fail "apt-get install podman runc debootstrap failed"
fi
if [ "$(id -u)" = 0 ] && [ ! -e /etc/containers/containers.conf ] && command -v runc >/dev/null 2>&1; then
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768  # runc is refused higher values here
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf <<EOF
# written by lmmbench's scripts/container-engine.sh (root without CAP_SYS_RESOURCE, hybrid cgroups)
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
fi
podman info >/dev/null 2>"$HOME_DIR/info.err" || fail "podman info fails: $(tail -1 "$HOME_DIR/info.err")"

VENV=$(realpath "$VENV") SRC=$(realpath "$SRC")
[ -x "$VENV/bin/python" ] || fail "$VENV/bin/python does not exist"
BASE=$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix)')
PYDIR=$("$VENV/bin/python" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
TAG=localhost/lmmbench-test:$({ printf '%s\n' "$VENV" "$SRC" "$BASE" "$SUITE"; cat "$0"; } | sha256sum | cut -c1-12)  # this script: its image

MOUNTS=$("$VENV/bin/python" - "$VENV" "$SRC" "$BASE" <<'PY'
import os, sys
# Each folder at the path Python names it by (a .pth line may go through a symlink), from its real place.
found = {os.path.abspath(p): os.path.realpath(p) for p in sys.argv[1:] + [p for p in sys.path if p and os.path.isdir(p)]}
keep: list = []
for p in sorted(found, key=len):  # a folder inside one already mounted is not mounted again
    if p != "/usr" and not p.startswith("/usr/") and not any(p == k or p.startswith(k + "/") for k in keep):
        keep.append(p)
print("\n".join(p if found[p] == p else f"{found[p]}:{p}" for p in keep))
PY
)
if [ "$PRINT_MOUNTS" = 1 ]; then
  echo "$MOUNTS"
  exit 0
fi
if podman image exists "$TAG"; then
  echo "$TAG"
  exit 0
fi
# Before another is built, the test images of venvs that are gone (a docs leg's, a deleted checkout's) and the
# older ones of this venv and sources (an earlier version of this script) are removed.
for old in $(podman images -q --filter reference=localhost/lmmbench-test); do
  labels=$(podman image inspect --format '{{index .Labels "lmmbench.venv"}} {{index .Labels "lmmbench.src"}}' "$old" \
           2>/dev/null || true)
  venv=${labels% *}
  if [ -n "$venv" ] && { [ ! -d "$venv" ] || [ "$labels" = "$VENV $SRC" ]; }; then
    podman rmi -f "$old" >/dev/null 2>&1 || true
  fi
done
ROOTFS_TAR=$HOME_DIR/rootfs-$SUITE.tar
if [ ! -s "$ROOTFS_TAR" ]; then
  command -v debootstrap >/dev/null 2>&1 || fail "debootstrap is not installed (apt-get install debootstrap)"
  # The Debian mirror of this machine's apt sources (deb822 URIs: or a one-line deb entry), read at run time.
  MIRROR=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
           grep -v security | sed -E 's/^URIs:[[:space:]]*//; s/^deb (\[[^]]*\] )?//' | awk '{print $1; exit}' || true)
  [ -n "$MIRROR" ] || fail "no Debian mirror in /etc/apt/sources.list*: debootstrap needs one"
  ROOTFS=$(mktemp -d "$HOME_DIR/rootfs.XXXX")
  echo "container-engine: debootstrap $SUITE from $MIRROR (about a minute)" >&2
  debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOTFS" "$MIRROR" > "$HOME_DIR/debootstrap.log" 2>&1 ||
    { rm -rf "$ROOTFS"; fail "debootstrap failed; see $HOME_DIR/debootstrap.log"; }
  tar -C "$ROOTFS" -cf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  rm -rf "$ROOTFS"
fi
# The layered venv: its own site-packages first (requirements installed in a container land there), then the
# mounted sources and the mounted venv's packages.
LAYER=$(mktemp -d "$HOME_DIR/layer.XXXX")
trap 'rm -rf "$LAYER"' EXIT
mkdir -p "$LAYER/opt/lmmbench/bin" "$LAYER/opt/lmmbench/lib/$PYDIR/site-packages"
printf 'home = %s/bin\ninclude-system-site-packages = false\n' "$BASE" > "$LAYER/opt/lmmbench/pyvenv.cfg"
ln -s "$(realpath "$VENV/bin/python")" "$LAYER/opt/lmmbench/bin/python"
[ -x "$VENV/bin/uv" ] && ln -s "$VENV/bin/uv" "$LAYER/opt/lmmbench/bin/uv"
printf '%s\nimport site; site.addsitedir(%s)\n' "$SRC" "'$VENV/lib/$PYDIR/site-packages'" \
  > "$LAYER/opt/lmmbench/lib/$PYDIR/site-packages/host.pth"
cp "$ROOTFS_TAR" "$LAYER/image.tar" && tar -C "$LAYER" -rf "$LAYER/image.tar" ./opt/lmmbench
podman import -q --change "ENV PATH=/opt/lmmbench/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "LABEL lmmbench.venv=$VENV" --change "LABEL lmmbench.src=$SRC" --change "LABEL lmmbench.base=$BASE" \
  "$LAYER/image.tar" "$TAG" >/dev/null || fail "podman import failed"
echo "$TAG"
