#!/usr/bin/env bash
# Lint, type-check and test. pytest's exit code 5 (no tests collected) is a failure in every pass.
#  1. ruff and mypy --strict;
#  2. the tests not marked serial, on two pytest-xdist workers (tests/conftest.py says which are serial: those
#     that time something against a ground truth);
#  3. the serial ones, one at a time; then the numerics ones (floats across batch sizes and kernels) again with
#     torch's CPU kernels held to AVX2, as an AVX2-only CPU runs them (tests/conftest.py: NUMERICS_HOLDS);
#  4. the docs leg: every bash block of README.md and docs/*.md run as pasted, in order (tests/docs), as two
#     shards by doc file side by side; each shard's closing line counts the blocks run (passed), skipped by
#     their marker and failed; SKIP_DOCS=1 skips it;
#  5. the version legs (scripts/setup.sh --dev creates their venvs; SKIP_LEGS=1 skips them): the install smoke
#     (tests/install: every command's --help, perf, ttft-breakdown, eval, serve) and the in-process subset
#     (breakdown, serve engine, eval scoring) on a stock GPU image's versions (.venv-gpuimage) and on the lowest
#     versions pyproject admits (.venv-floor); the smoke's torch-free part on the base package's floors.
# With arguments (test paths, -k ...), one plain pytest run of those instead of passes 2 and 3.
set -uo pipefail
cd "$(dirname "$0")/.."
WORKERS=${LMMBENCH_TEST_WORKERS:-2}
T_START=$SECONDS

pytest_pass() {  # pytest_pass NAME ARGS...: fails on any failure and on "no tests collected"
  local name=$1; shift
  echo "== pytest: $name"
  local t0=$SECONDS
  "$@"
  local rc=$?
  echo "== $name: $((SECONDS - t0)) s"
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
  grep -qw avx512f /proc/cpuinfo || echo "== (this CPU has no AVX-512: its kernels are AVX2's already; the pass repeats them)"
  pytest_pass "numerics, kernels held to AVX2" env LMMBENCH_NUMERICS_HOLD=avx2 ATEN_CPU_CAPABILITY=avx2 \
    MKL_ENABLE_INSTRUCTIONS=AVX2 .venv/bin/python -m pytest -q -m "numerics and not docs" \
    -p no:cacheprovider --durations=15
}

.venv/bin/ruff check src tests benchmarks || exit 1
.venv/bin/mypy src || exit 1
if [ "$#" -gt 0 ]; then
  pytest_pass "selected" .venv/bin/python -m pytest -q "$@"
else
  echo "== leg: main ($(versions .venv))"
  pytest_pass "parallel ($WORKERS workers)" .venv/bin/python -m pytest -q -rs -n "$WORKERS" -m "not serial and not docs" \
    -p no:cacheprovider --durations=15
  pytest_pass "serial" .venv/bin/python -m pytest -q -m "serial and not docs" -p no:cacheprovider --durations=15
  numerics_pass
fi
# The docs leg runs beside the version legs (neither times anything), as two shards by doc file, each in its own
# fresh folder and process group (tests/docs/doc_blocks.py: FIRST_SHARD_FILES): their output is kept in files and
# printed, with their verdict, once the version legs are done.
DOCS_PIDS=()
DOCS_LOGS=()
finish_docs() {  # wait for the docs shards, print their output, fail as pytest_pass does
  [ "${#DOCS_PIDS[@]}" -gt 0 ] || return 0
  local worst=0 i rc
  for i in "${!DOCS_PIDS[@]}"; do
    wait "${DOCS_PIDS[$i]}"
    rc=$?
    echo "== leg: docs, shard ${DOCS_SHARDS[$i]} (every documented bash block of its files, in order, in one fresh folder)"
    cat "${DOCS_LOGS[$i]}"
    echo "== docs shard ${DOCS_SHARDS[$i]}: exit $rc"
    if [ "$rc" -eq 5 ]; then
      echo "pytest collected no tests (docs shard ${DOCS_SHARDS[$i]}): failing" >&2
      rc=1
    fi
    [ "$rc" -eq 0 ] || worst=$rc
  done
  DOCS_PIDS=()
  echo "== docs: $((SECONDS - DOCS_T0)) s (beside the version legs)"
  [ "$worst" -eq 0 ] || exit "$worst"
}
stop_docs() {  # a failing version leg ends the script: the docs shards' process groups go with them
  local pid
  for pid in "${DOCS_PIDS[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -f "${DOCS_LOGS[@]}"
}
on_exit() {  # the docs shards go with a failing script; every ending prints the total
  local rc=$?
  stop_docs
  echo "== total: $((SECONDS - T_START)) s (exit $rc)"
}
trap on_exit EXIT
DOCS_SHARDS=(first rest)
if [ "${SKIP_DOCS:-0}" != "1" ]; then
  set -m  # each shard in a process group of its own, so stop_docs reaches its servers too
  for shard in "${DOCS_SHARDS[@]}"; do
    log=$(mktemp)
    DOCS_LOGS+=("$log")
    LMMBENCH_DOCS_SHARD=$shard .venv/bin/python -m pytest -q -m docs -p no:cacheprovider -rs --durations=15 \
      tests/docs > "$log" 2>&1 &
    DOCS_PIDS+=($!)
  done
  DOCS_T0=$SECONDS
  set +m
fi
if [ "${SKIP_LEGS:-0}" = "1" ]; then
  finish_docs
  exit 0
fi
IN_PROCESS=(tests/ttft/test_measured_or_refused.py tests/ttft/test_hooks.py tests/ttft/test_study_names.py
  tests/models/test_tiny_models.py
  tests/serve/test_serve_engine.py tests/serve/test_serve_media_guard.py tests/eval/test_scoring.py
  tests/eval/test_context_sharing.py tests/eval/test_read_positions.py)
leg() {  # leg VENV TITLE PYTEST-ARGS...
  local venv=$1 title=$2; shift 2
  if [ ! -x "$venv/bin/python" ]; then
    echo "$venv is missing: run scripts/setup.sh --dev (or SKIP_LEGS=1 to skip the version legs)" >&2
    exit 1
  fi
  echo "== leg: $title ($(versions "$venv"))"
  pytest_pass "$title" env PYTHONPATH=src "$venv/bin/python" -m pytest -q -p no:cacheprovider --durations=15 "$@"
}
leg .venv-gpuimage "GPU image versions" tests/install "${IN_PROCESS[@]}"
leg .venv-floor "lowest versions pyproject admits" tests/install "${IN_PROCESS[@]}"
# The base package is the load-testing client: its floors without torch, and torch never pulled in.
if .venv-floor-base/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  echo "the base package's install pulled torch: 'pip install lmmbench' must not" >&2
  exit 1
fi
leg .venv-floor-base "base package, lowest versions (no torch)" tests/install -k "help or perf or entry_point or lists"
finish_docs
