#!/usr/bin/env bash
# A second, "remote" Docker engine behind a real sshd on 127.0.0.1, for manual checks and
# benchmarks of SSH Hosts (tests use the pytest fixture in tests/remote_engine.py instead).
#   scripts/remote-engine.sh serve   start one, print its facts as JSON, run until Ctrl-C/TERM
#   scripts/remote-engine.sh clean   remove instances left behind by killed runs
# Needs root, dockerd, ip, and sshd (apt-get install -y --no-install-recommends openssh-server).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m tests.remote_engine "$@"
