#!/usr/bin/env bash
# Set up, then run the checks CI runs: ruff, mypy (strict), the import contracts, then the
# tests in two layers: the fast layer first (pure rules, planners, loader limits, redaction, ownership, store, prune
# guard: no Docker, no emulator process; under a minute), so a broken rule fails in seconds;
# then everything that uses the Docker engine, emulators or RTSP servers. Extra arguments go to
# pytest in both layers (e.g. -k conflict, -x).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
# the layering (pyproject.toml [tool.importlinter]): the summary, or all of it when broken
contracts="$(.venv/bin/lint-imports --no-cache --no-logo)" || { echo "$contracts"; exit 1; }
echo "$contracts" | tail -n 8
layer() {  # pytest exits 5 when a layer selects nothing (e.g. -k matches only the other one)
  local code=0
  .venv/bin/pytest "$@" || code=$?
  [ "$code" -eq 0 ] || [ "$code" -eq 5 ]
}
layer -n 4 -m "not docker and not services" "$@"  # 4 workers: the layer mostly waits on I/O
# 2 workers, one module each: CI's engine stalled on 3. The 25 slowest tests are printed, so a
# CI log says where the layer's time goes.
layer -n 2 --dist loadfile --durations=25 -m "docker or services" "$@"
