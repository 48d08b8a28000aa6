#!/usr/bin/env bash
# Create .venv and install lmmbench with every extra, torch pinned by constraints.txt.
# Also create .venv-tf517: the same install with transformers pinned to the oldest version CI
# tests (pyproject's floor, what the GPU image ships); scripts/test.sh runs the in-process
# subset on it. SKIP_TF517=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[all,dev]"
if [ "${SKIP_TF517:-0}" != "1" ]; then
  [ -x .venv-tf517/bin/python ] || "$PY" -m venv .venv-tf517
  .venv-tf517/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[all,dev]" \
    "transformers==5.17.*"
fi
