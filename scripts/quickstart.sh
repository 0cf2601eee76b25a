#!/usr/bin/env bash
# Set up, build the emulated RT-VLM image, and converge the quickstart example on the local
# Docker engine: afterwards `reconciler status` shows a Ready Deployment on 127.0.0.1:18000.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
.venv/bin/python -m emulators.image build-emulator --tag rtvi-emulator:dev >/dev/null
.venv/bin/reconciler plan specs/examples/quickstart || [ $? -eq 2 ]
.venv/bin/reconciler apply specs/examples/quickstart --timeout 120
.venv/bin/reconciler status
