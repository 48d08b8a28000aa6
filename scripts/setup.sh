#!/usr/bin/env bash
# Create .venv and install lmmbench with every extra, torch pinned by constraints.txt.
# Also create .venv-tf517: the runtime and test extras with transformers pinned to the oldest version CI
# tests (pyproject's floor, what the GPU image ships); scripts/test.sh runs the in-process
# subset on it. SKIP_TF517=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[all,dev]"
if [ "${SKIP_TF517:-0}" != "1" ]; then
  [ -x .venv-tf517/bin/python ] || "$PY" -m venv .venv-tf517
  .venv-tf517/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[models,serve,eval,test]" \
    "transformers==5.17.*"
fi

# Headless Chromium for the report-page test (tests/reports/test_report_pages_chromium.py).
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    :  # already installed
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium (headless report-page test)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
        echo "setup: could not install chromium with apt-get; the report-page test will be skipped" >&2
else
    echo "setup: chromium is not installed and apt-get (as root) is not available; the report-page" \
         "test will be skipped. Install chromium with your package manager to run it." >&2
fi
