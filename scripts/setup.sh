#!/usr/bin/env bash
# Set up .venv for the main job: lmmbench with the in-process models extra, torch pinned by constraints.txt.
#   bash scripts/setup.sh          the main job (README command 1): `lmmbench run ttft-breakdown` and friends
#   bash scripts/setup.sh --dev    + every extra (and `libero`, outside `all` for its 1.5 GB), the dev tools, the
#                                  version legs' venvs, Chromium and EGL: what scripts/test.sh needs (README
#                                  command 2, .ci/run); SKIP_LEGS=1 skips the legs' venvs
# The version legs (scripts/test.sh runs the install smoke and the in-process subset on each):
#   .venv-gpuimage    a stock CUDA image's versions (scripts/gpu-image-versions.txt: typer 0.27.2, transformers 5.17.0, ...)
#   .venv-floor       the lowest versions pyproject admits (uv --resolution lowest-direct): base + models, serve, eval
#   .venv-floor-base  the same for the base package alone (the load-testing client: no torch)
# Packages are installed with uv (fast); uv does not read pip's configuration, so the find-links folders pip is
# configured with (where a CPU torch wheel may lie) are passed on to it. Idempotent: a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEV=0
[ "${1:-}" = "--dev" ] && DEV=1

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "uv>=0.5" 2>&1 | grep -v "^WARNING: Location" || true

# pip's find-links (environment or config): uv reads neither, so they are passed explicitly.
links=${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}
uv_args=(-q -c constraints.txt)
for dir in $links; do uv_args+=(--find-links "$dir"); done

uv_install() {  # uv_install PYTHON SPEC...
  local py=$1; shift
  .venv/bin/uv pip install --python "$py" "${uv_args[@]}" "$@"
}

if [ "$DEV" = 1 ]; then
  uv_install .venv/bin/python -e ".[all,dev,libero]"
else
  uv_install .venv/bin/python -e ".[models]"
fi
# torch must be the CPU build here (a CUDA build is several GB of nvidia packages): say so if it is not.
.venv/bin/python -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)" ||
  echo "setup: warning: torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') is a CUDA build" >&2

[ "$DEV" = 1 ] || exit 0

if [ "${SKIP_LEGS:-0}" != "1" ]; then  # the version legs of scripts/test.sh, rebuilt when pyproject changes
  leg_venv() {  # leg_venv DIR UV-ARGS...: a fresh venv when pyproject.toml is newer than it, then the install
    local dir=$1; shift
    if [ ! -x "$dir/bin/python" ] || [ pyproject.toml -nt "$dir/.lmmbench-leg" ]; then
      rm -rf "$dir" && "$PY" -m venv "$dir"
    fi
    uv_install "$dir/bin/python" "$@" && touch "$dir/.lmmbench-leg"
  }
  # The torch build .venv got (the CPU one), pinned to the letter: uv's lowest-direct resolution otherwise takes
  # the plain 2.13.0 over 2.13.0+cpu, and that is the CUDA build with several GB of nvidia packages.
  torch_pin=$(mktemp)
  .venv/bin/python -c "from importlib.metadata import version; print('torch==' + version('torch'))" > "$torch_pin"
  uv_args+=(-c "$torch_pin")
  leg_venv .venv-gpuimage -c scripts/gpu-image-versions.txt -e ".[models,serve,eval,test]"
  leg_venv .venv-floor --resolution lowest-direct -e ".[models,serve,eval,test]"
  leg_venv .venv-floor-base --resolution lowest-direct -e ".[test]"
  rm -f "$torch_pin"
fi

# Headless Chromium for the report-page test (tests/reports/test_report_pages_chromium.py).
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  :  # already installed
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing Debian's chromium (headless report-page test)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
    echo "setup: could not install chromium with apt-get; the report-page test will fail under CI" >&2
else
  echo "setup: chromium is not installed and apt-get (as root) is not available; install chromium with your" \
       "package manager to run the report-page test." >&2
fi

# EGL (Mesa's software rasterizer) for LIBERO's headless rendering (tests/episodes/test_libero.py); stock Debian
# images of this kind have it.
if ! ldconfig -p 2>/dev/null | grep "libEGL_mesa.so.0" >/dev/null; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's EGL and Mesa (LIBERO renders headless with EGL)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null; } ||
      echo "setup: could not install libegl1 with apt-get; the LIBERO tests will fail under CI" >&2
  else
    echo "setup: Mesa's EGL is missing; install libegl1, libegl-mesa0 and libgl1-mesa-dri to run LIBERO's suites" >&2
  fi
fi

# A container engine (podman, installed as root with apt-get) and the self-contained images the container tests
# use, built without a registry (scripts/container-engine.sh: `lmmbench envs build-image` of this checkout's wheel
# on a debootstrap'd Debian, about a minute for the base the first time; then lmmbench alone, the image of
# tests/plans/test_container_wheel_images.py and the docs, and lmmbench[eval], the image of
# tests/plans/test_container_engine.py, a few minutes). It runs in the background; the tests and the docs leg wait
# for a build under way (its lock) and reuse what it built (cached by content). Where no engine can run, those tests
# are skipped with the reason and pytest -rs lists it.
if [ "${SKIP_CONTAINER:-0}" != "1" ]; then
  mkdir -p "${LMMBENCH_CONTAINER_CACHE:-/var/tmp/lmmbench-containers-$(id -u)}"
  log="${LMMBENCH_CONTAINER_CACHE:-/var/tmp/lmmbench-containers-$(id -u)}/setup.log"
  nohup bash -c 'bash scripts/container-engine.sh --extras "" && bash scripts/container-engine.sh --extras eval' \
    > "$log" 2>&1 < /dev/null &
  echo "setup: container engine and test images building in the background (log: $log)"
fi
