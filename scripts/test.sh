#!/usr/bin/env bash
# Set up a virtual environment with every extra the tests use, then run them.
# With no arguments: the full suite, as CI (.ci/run) runs it. The quick suite
# for development: bash scripts/test.sh -m "not slow" (see the README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || $PY -m venv .venv
# pip resolving every extra takes many seconds even when nothing changed:
# install again only when pyproject.toml differs from the last install.
stamp=.venv/.memstore-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[dev,embed,bench,hermes,peers,server,postgres,ui,mcp]"
  echo "$want" > "$stamp"
fi
# Each test process imports memstore and the test modules; without their
# cached bytecode (PYTHONDONTWRITEBYTECODE set in the environment) every
# process compiles them again: about 6 CPU-s per worker at collection, and
# more in the CLI and Hermes processes the tests start. The caches go to
# __pycache__ folders, which git ignores.
unset PYTHONDONTWRITEBYTECODE
# -n: one worker per core (pytest-xdist); PYTEST_WORKERS=0 runs in one process.
.venv/bin/pytest -n "${PYTEST_WORKERS:-auto}" "$@"
