#!/usr/bin/env bash
# Remake requirements.lock from pyproject.toml with pip-tools (a dev dependency): every package
# pinned with its hashes. Pins already in the lock are kept; `scripts/lock.sh --upgrade` (or
# `--upgrade-package NAME`) moves them. Run it after editing pyproject.toml's dependencies, then
# `bash scripts/setup.sh`; tests/test_lock.py fails until the two agree.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
exec .venv/bin/pip-compile --quiet --extra dev --generate-hashes --strip-extras --allow-unsafe \
  --no-emit-index-url --no-emit-find-links -o requirements.lock "$@" pyproject.toml
