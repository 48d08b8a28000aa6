#!/usr/bin/env bash
# Lint, type-check and test. pytest's exit code 5 (no tests collected) is a failure in every pass.
#  1. ruff and mypy --strict;
#  2. the tests not marked serial, on two pytest-xdist workers (tests/conftest.py says which are serial: those
#     that time something against a ground truth); beside them, from their start, the background jobs (they time
#     nothing): the docs leg, every bash block of README.md and docs/*.md run as pasted, in order (tests/docs), as
#     two shards by doc file (SKIP_DOCS=1 skips it), and the version legs (scripts/setup.sh --dev creates their
#     venvs; SKIP_LEGS=1 skips them): the install smoke (tests/install: every command's --help, perf,
#     ttft-breakdown, eval, serve) and the in-process subset (breakdown, serve engine, eval scoring) on a stock GPU
#     image's versions (.venv-gpuimage) and on the lowest versions pyproject admits (.venv-floor); the smoke's
#     torch-free part on the base package's floors. Their output is printed, with each one's wall and CPU time and
#     verdict, once 2 and all of them are done;
#  3. then, with nothing beside them, the serial ones, one at a time; then the numerics ones (floats across batch
#     sizes and kernels) again with torch's CPU kernels held to AVX2, as an AVX2-only CPU runs them
#     (tests/conftest.py: NUMERICS_HOLDS), on a CPU with AVX-512 (elsewhere the passes above ran them on AVX2
#     kernels already).
# Every pass prints its time and its 15 slowest tests; every ending prints the total. Tests marked peer_heavy (a
# peer's venv of gigabytes: lerobot's) are in no pass: run them by hand (tests/conftest.py says how).
# With arguments (test paths, -k ...), one plain pytest run of those instead of passes 2 and 3.
set -uo pipefail
cd "$(dirname "$0")/.."
# Bytecode: uv installs none, and images of this kind set PYTHONDONTWRITEBYTECODE=1, so every Python process of the
# run (each xdist worker, each CLI subprocess a test or a docs block starts, each version leg) compiled torch's and
# transformers' sources again: 3-4 s of CPU per `import torch, transformers` on a 2-core EPYC (8.4 s user without
# bytecode, 4.8-5.5 s with). Written once on first import, the bytecode serves every later process of the run.
unset PYTHONDONTWRITEBYTECODE
WORKERS=${LMMBENCH_TEST_WORKERS:-2}
T_START=$SECONDS

pytest_pass() {  # pytest_pass NAME ARGS...: fails on any failure and on "no tests collected"
  local name=$1; shift
  echo "== pytest: $name"
  local rc
  # the pass's CPU seconds (its processes and their children) beside its wall time: how busy it kept the cores
  local TIMEFORMAT="== $name: %0R s wall, %1U s user + %1S s system CPU"
  time { "$@"; rc=$?; }
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests ($name): failing" >&2
    exit 1
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
}

versions() {  # versions VENV: the versions that decide whether lmmbench imports, one line
  "$1/bin/python" - <<'PY'
from importlib.metadata import PackageNotFoundError, version
out = []
for name in ("typer", "click", "rich", "pydantic", "tokenizers", "transformers", "huggingface_hub", "numpy", "torch"):
    try:
        out.append(f"{name} {version(name)}")
    except PackageNotFoundError:
        out.append(f"{name} -")
print(", ".join(out))
PY
}

numerics_pass() {  # the numerics tests again, one at a time (serial ones among them keep their ground truth), torch's CPU kernels held to AVX2 (tests/conftest.py: NUMERICS_HOLDS)
  # An AVX-512 CPU otherwise never runs the kernels an AVX2-only CPU (an AMD EPYC) runs, whose float32 results differ
  # in the last bits. Only where the CPU has AVX2: torch does not check, and a kernel the CPU lacks dies of SIGILL.
  if ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    echo "== numerics pass skipped: no AVX2 on this CPU (or no /proc/cpuinfo), nothing to hold the kernels to"
    return 0
  fi
  # Without AVX-512 the hold changes nothing: torch's own kernels are AVX2's already (ATEN_CPU_CAPABILITY's default
  # is the best the CPU has) and MKL_ENABLE_INSTRUCTIONS=AVX2 moved no result on a 2-core AMD EPYC (issue 48's
  # note: MKL dispatches by vendor there). The passes above ran these tests on exactly the kernels the hold asks for.
  if ! grep -qw avx512f /proc/cpuinfo; then
    echo "== numerics pass not needed: this CPU has no AVX-512, so the passes above ran the numerics tests on AVX2 kernels"
    return 0
  fi
  pytest_pass "numerics, kernels held to AVX2" env LMMBENCH_NUMERICS_HOLD=avx2 ATEN_CPU_CAPABILITY=avx2 \
    MKL_ENABLE_INSTRUCTIONS=AVX2 .venv/bin/python -m pytest -q -m "numerics and not docs and not peer_heavy" \
    -p no:cacheprovider --durations=15
}

# The background jobs: the docs leg (two shards by doc file, each in its own fresh folder: tests/docs/doc_blocks.py
# FIRST_SHARD_FILES) and the version legs, beside the parallel pass, which times nothing either: together they keep
# both cores busy. Never beside the serial pass: at nice 10 they moved a 30 ms injected TTFT to 41.6 ms there, and
# even at idle priority (SCHED_IDLE, which passed beside two busy loops) a plan's 20 ms TTFT was measured 23-25 ms
# and the pass took 937 s instead of 750 (memory, disk and the kernel's own work are not scheduled by priority).
# Each job runs in a process group of its own (so a failing script stops its servers too); its output is kept in
# a file and printed, with its wall and CPU time and verdict, once all are done.
BG_NAMES=()
BG_PIDS=()
BG_LOGS=()
bg_start() {  # bg_start NAME COMMAND...: COMMAND (or a function of this script) in the background
  local name=$1; shift
  local log
  log=$(mktemp)
  set -m
  # shellcheck disable=SC2034  # TIMEFORMAT is read by `time`
  ( TIMEFORMAT="== $name: %0R s wall, %1U s user + %1S s system CPU"; time { "$@"; rc=$?; }
    exit $rc ) > "$log" 2>&1 &
  BG_PIDS+=($!)
  set +m
  BG_NAMES+=("$name")
  BG_LOGS+=("$log")
}
bg_finish() {  # wait for every background job, print its output, fail as pytest_pass does
  [ "${#BG_PIDS[@]}" -gt 0 ] || return 0
  local worst=0 i rc
  for i in "${!BG_PIDS[@]}"; do
    wait "${BG_PIDS[$i]}"
    rc=$?
    echo "== background: ${BG_NAMES[$i]}"
    cat "${BG_LOGS[$i]}"
    echo "== ${BG_NAMES[$i]}: exit $rc"
    if [ "$rc" -eq 5 ]; then
      echo "pytest collected no tests (${BG_NAMES[$i]}): failing" >&2
      rc=1
    fi
    [ "$rc" -eq 0 ] || worst=$rc
  done
  rm -f "${BG_LOGS[@]}"
  BG_PIDS=()
  [ "$worst" -eq 0 ] || exit "$worst"
}
bg_stop() {  # a failing pass ends the script: the background jobs' process groups go with it
  local pid
  for pid in "${BG_PIDS[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  [ "${#BG_LOGS[@]}" -eq 0 ] || rm -f "${BG_LOGS[@]}"
}
on_exit() {  # the background jobs go with a failing script; every ending prints the total
  local rc=$?
  bg_stop
  echo "== total: $((SECONDS - T_START)) s (exit $rc)"
}
trap on_exit EXIT

IN_PROCESS=(tests/ttft/test_measured_or_refused.py tests/ttft/test_hooks.py tests/ttft/test_study_names.py
  tests/models/test_tiny_models.py
  tests/serve/test_serve_engine.py tests/serve/test_serve_media_guard.py tests/eval/test_scoring.py
  tests/eval/test_context_sharing.py tests/eval/test_read_positions.py)
leg() {  # leg VENV TITLE PYTEST-ARGS...: one version leg (run in the background by start_background)
  local venv=$1 title=$2; shift 2
  echo "== leg: $title ($(versions "$venv"))"
  pytest_pass "$title" env PYTHONPATH=src "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=15 "$@"
}
start_background() {  # the docs shards and the version legs, checked first
  if [ "${SKIP_DOCS:-0}" != "1" ]; then
    local shard
    for shard in first rest; do
      bg_start "docs, shard $shard (every documented bash block of its files, in order, in one fresh folder)" \
        env LMMBENCH_DOCS_SHARD=$shard .venv/bin/python -m pytest -q -m docs -p no:cacheprovider -rs \
        --durations=15 tests/docs
    done
  fi
  [ "${SKIP_LEGS:-0}" != "1" ] || return 0
  local venv
  for venv in .venv-gpuimage .venv-floor .venv-floor-base; do
    if [ ! -x "$venv/bin/python" ]; then
      echo "$venv is missing: run scripts/setup.sh --dev (or SKIP_LEGS=1 to skip the version legs)" >&2
      exit 1
    fi
  done
  # The base package is the load-testing client: its floors without torch, and torch never pulled in.
  if .venv-floor-base/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
    echo "the base package's install pulled torch: 'pip install lmmbench' must not" >&2
    exit 1
  fi
  bg_start "version leg: GPU image versions" leg .venv-gpuimage "GPU image versions" tests/install "${IN_PROCESS[@]}"
  bg_start "version leg: lowest versions" leg .venv-floor "lowest versions pyproject admits" tests/install \
    "${IN_PROCESS[@]}"
  bg_start "version leg: base package" leg .venv-floor-base "base package, lowest versions (no torch)" tests/install \
    -k "help or perf or entry_point or lists"
}

.venv/bin/ruff check src tests benchmarks || exit 1
.venv/bin/mypy src || exit 1
if [ "$#" -gt 0 ]; then
  pytest_pass "selected" .venv/bin/python -m pytest -q "$@"
  start_background
else
  echo "== leg: main ($(versions .venv))"
  start_background
  pytest_pass "parallel ($WORKERS workers)" .venv/bin/python -m pytest -q -rs -n "$WORKERS" \
    -m "not serial and not docs and not peer_heavy" -p no:cacheprovider --durations=15
  bg_finish
  pytest_pass "serial" .venv/bin/python -m pytest -q -m "serial and not docs and not peer_heavy" -p no:cacheprovider \
    --durations=15
  numerics_pass
fi
bg_finish  # with arguments: the background jobs started after the selected tests
