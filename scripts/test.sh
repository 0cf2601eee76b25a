#!/usr/bin/env bash
# Set up, then run the checks CI runs: ruff, mypy (strict) and the whole test suite against a
# real Docker engine. Extra arguments go to pytest (e.g. -k conflict, -x).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/pytest "$@"
