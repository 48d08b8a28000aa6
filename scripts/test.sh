#!/usr/bin/env bash
# Lint, type-check and test. pytest's exit code 5 (no tests collected) is a failure.
# Then the in-process subset (breakdown, serve engine, eval scoring) on .venv-tf517, transformers
# 5.17, the oldest version pyproject admits (scripts/setup.sh creates it); SKIP_TF517=1 skips it.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check src tests benchmarks || exit 1
.venv/bin/mypy src || exit 1
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit "$rc"
if [ "${SKIP_TF517:-0}" = "1" ]; then
  exit 0
fi
if [ ! -x .venv-tf517/bin/python ]; then
  echo ".venv-tf517 is missing: run scripts/setup.sh (or SKIP_TF517=1 to skip the transformers 5.17 run)" >&2
  exit 1
fi
echo "== transformers $(.venv-tf517/bin/python -c 'import transformers; print(transformers.__version__)'): in-process subset"
PYTHONPATH=src .venv-tf517/bin/python -m pytest -q -p no:cacheprovider \
  tests/ttft/test_measured_or_refused.py tests/ttft/test_hooks.py tests/models/test_tiny_models.py \
  tests/serve/test_serve_engine.py tests/serve/test_serve_media_guard.py tests/eval/test_scoring.py
rc=$?
[ "$rc" -eq 5 ] && { echo "pytest collected no tests on .venv-tf517: failing" >&2; exit 1; }
exit "$rc"
