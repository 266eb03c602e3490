#!/usr/bin/env bash
# Set up a virtual environment with every extra the tests use, then run them.
# Slow tests (real Hermes agent, real restart) are included; add -m "not slow" to skip them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || $PY -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[dev,embed,bench,hermes,peers,server,postgres]"
# -n: one worker per core (pytest-xdist); PYTEST_WORKERS=0 runs in one process.
.venv/bin/pytest -n "${PYTEST_WORKERS:-auto}" "$@"
