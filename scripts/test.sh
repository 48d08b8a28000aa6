#!/usr/bin/env bash
# Lint, type-check and test. pytest's exit code 5 (no tests collected) is a failure in every pass.
#  1. ruff and mypy --strict;
#  2. the tests not marked serial, on two pytest-xdist workers (tests/conftest.py says which are serial: those
#     that time something against a ground truth);
#  3. the serial ones, one at a time;
#  4. the in-process subset (breakdown, serve engine, eval scoring) on .venv-tf517, transformers 5.17, the
#     oldest version pyproject admits (scripts/setup.sh --dev creates it); SKIP_TF517=1 skips it.
# With arguments (test paths, -k ...), one plain pytest run of those instead of passes 2 and 3.
set -uo pipefail
cd "$(dirname "$0")/.."
WORKERS=${LMMBENCH_TEST_WORKERS:-2}

pytest_pass() {  # pytest_pass NAME ARGS...: fails on any failure and on "no tests collected"
  local name=$1; shift
  echo "== pytest: $name"
  "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests ($name): failing" >&2
    exit 1
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
}

.venv/bin/ruff check src tests benchmarks || exit 1
.venv/bin/mypy src || exit 1
if [ "$#" -gt 0 ]; then
  pytest_pass "selected" .venv/bin/python -m pytest -q "$@"
else
  pytest_pass "parallel ($WORKERS workers)" .venv/bin/python -m pytest -q -n "$WORKERS" -m "not serial" \
    -p no:cacheprovider --durations=15
  pytest_pass "serial" .venv/bin/python -m pytest -q -m serial -p no:cacheprovider --durations=15
fi
if [ "${SKIP_TF517:-0}" = "1" ]; then
  exit 0
fi
if [ ! -x .venv-tf517/bin/python ]; then
  echo ".venv-tf517 is missing: run scripts/setup.sh --dev (or SKIP_TF517=1 to skip the transformers 5.17 run)" >&2
  exit 1
fi
echo "== transformers $(.venv-tf517/bin/python -c 'import transformers; print(transformers.__version__)'): in-process subset"
pytest_pass "transformers 5.17" env PYTHONPATH=src .venv-tf517/bin/python -m pytest -q -p no:cacheprovider \
  tests/ttft/test_measured_or_refused.py tests/ttft/test_hooks.py tests/ttft/test_study_names.py \
  tests/models/test_tiny_models.py \
  tests/serve/test_serve_engine.py tests/serve/test_serve_media_guard.py tests/eval/test_scoring.py \
  tests/eval/test_context_sharing.py tests/eval/test_read_positions.py
