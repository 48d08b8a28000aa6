#!/usr/bin/env bash
# A container engine and the self-contained image for the container executor's tests (tests/plans/test_container_engine.py).
#   bash scripts/container-engine.sh [--no-install] [--venv DIR] [--src DIR] [--extras LIST]
# 1. podman (with runc and debootstrap) from the system's apt sources when it is missing and this runs as root
#    (--no-install: never install; the engine must be there);
# 2. /etc/containers/containers.conf when the machine has none: runc (crun refuses hybrid cgroup v1/v2 hosts),
#    cgroupfs, and file limits no higher than this shell's hard limits (podman's defaults need CAP_SYS_RESOURCE);
# 3. the self-contained image of `lmmbench envs build-image --extras LIST` (default eval: what the tests' rows need),
#    run with the venv DIR's python (default .venv) and the sources DIR (default src) of this checkout: a Debian root
#    filesystem made with debootstrap (cached in $LMMBENCH_CONTAINER_CACHE), a Python and lmmbench from a wheel of
#    this checkout, nothing mounted from the host (docs/plans.md, "Images that carry lmmbench"). Cached by content:
#    built only when missing; parallel callers, and the background build of scripts/setup.sh --dev, wait for one.
# The last line printed is the image's name.
# Exit 3 with one line on stderr when no engine can run here, 1 when the image cannot be built.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL=1 VENV=.venv SRC=src EXTRAS=eval
while [ $# -gt 0 ]; do
  case $1 in
    --no-install) INSTALL=0; shift ;;
    --venv) VENV=$2; shift 2 ;;
    --src) SRC=$2; shift 2 ;;
    --extras) EXTRAS=$2; shift 2 ;;
    *) echo "container-engine: unknown argument $1" >&2; exit 2 ;;
  esac
done
fail() { echo "container-engine: $*" >&2; exit 3; }
# Not under $HOME or $LMMBENCH_HOME: each test session and the docs leg have their own.
HOME_DIR=${LMMBENCH_CONTAINER_CACHE:-/var/tmp/lmmbench-containers-$(id -u)}
mkdir -p "$HOME_DIR"
exec 9>"$HOME_DIR/build.lock"
flock 9  # held while podman is installed: a caller waits for an install under way

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
# The images of this script's earlier versions (a venv layered on the host's, mounted read-only) are gone for good.
for old in $(podman images -q --filter reference=localhost/lmmbench-test); do podman rmi -f "$old" >/dev/null 2>&1 || true; done
flock -u 9  # the engine is installed; the image builds have locks of their own
export LMMBENCH_CONTAINER_ENGINE=podman LMMBENCH_CONTAINER_CACHE=$HOME_DIR
log=$(mktemp "$HOME_DIR/build-image.XXXX.log")
if ! PYTHONPATH=$SRC "$VENV/bin/python" -c 'import sys; from lmmbench.cli.main import main; sys.exit(main())' \
     envs build-image --extras "$EXTRAS" 2> "$log"; then
  echo "container-engine: lmmbench envs build-image failed: $(tail -1 "$log")" >&2  # exit 1: the engine is there
  exit 1
fi
cat "$log" >&2 && rm -f "$log"
