#!/usr/bin/env bash
# Lint, type-check and test. pytest's exit code 5 (no tests collected) is a failure.
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
exit "$rc"
