#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine (root, no systemd): system packages, the
# project's venv, and a running Docker engine. Sourced by quickstart.sh and test.sh; safe to
# run again (each step checks before it acts).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
# python3-gi + GStreamer: the RTSP publisher image and the VST emulator; ffmpeg: frame probes and
# the RTVI emulator's stream ingest; etcd: the tests' 3-member cluster (scripts/etcd-cluster.sh;
# nothing is started at install: the tests start their own members on loopback ports);
# docker-registry, htpasswd and openssl: the registry the pull tests use (scripts/registry.sh).
APT_PACKAGES=(docker.io busybox-static python3 python3.11 python3.11-venv git ca-certificates
              openssh-server openssh-client iproute2 ffmpeg python3-gi gir1.2-gst-rtsp-server-1.0
              gstreamer1.0-rtsp gstreamer1.0-plugins-base gstreamer1.0-plugins-good
              gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools
              etcd-server etcd-client docker-registry apache2-utils openssl)
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/rtvi-dockerd.log}"

say() { printf '[setup] %s\n' "$*" >&2; }

need_sudo() { if [ "$(id -u)" -ne 0 ]; then echo sudo; fi; }

install_packages() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    $(need_sudo) apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $(need_sudo) apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
}

create_venv() {
  # The venv is the lock file (requirements.lock, made by scripts/lock.sh from pyproject.toml):
  # every package at its pinned version and hash, then this project itself without resolving
  # anything, so two machines set up a month apart run the same code.
  local stamp="$VENV/.installed-$(cat "$ROOT/pyproject.toml" "$ROOT/requirements.lock" "$ROOT/scripts/setup.sh" | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ]; then return; fi
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    python3 -m venv "$VENV"
  fi
  say "installing the locked dependencies (requirements.lock) into $VENV"
  "$VENV/bin/python" -m pip install -q --require-hashes -r "$ROOT/requirements.lock" 2>&1 \
    | grep -v "^WARNING: Location" || true
  say "installing rtvi-reconciler (editable, no dependency resolution)"
  # compat: the checkout on sys.path through a .pth line, not an import hook that every
  # command's start would load (10-20 ms of each `reconciler status`).
  "$VENV/bin/python" -m pip install -qq --no-deps --no-build-isolation -e "$ROOT" \
    --config-settings editable_mode=compat 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -c "import reconciler, docker, pydantic" \
    || { say "venv install failed"; exit 1; }
  rm -f "$VENV"/.installed-* && touch "$stamp"
}

compile_sources() {
  # Byte code for the checkout, as an install has: where PYTHONDONTWRITEBYTECODE is set (this
  # sandbox and CI set it) every `reconciler` start would compile its ~150 modules again
  # (0.3 s of CPU each time), and the images built from these files (the runner's, the
  # emulator's) carry the byte code too. Only files changed since the last run are compiled.
  "$VENV/bin/python" -m compileall -q -j 0 "$ROOT/reconciler" "$ROOT/controllers" \
    "$ROOT/specs" "$ROOT/state" "$ROOT/emulators" >/dev/null
}

start_dockerd() {
  if docker info >/dev/null 2>&1; then return; fi
  # A dockerd killed with -9 leaves a pid file that blocks the next start until it is reaped.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  say "starting dockerd (log: $DOCKERD_LOG)"
  # setsid: its own session, so it outlives the shell (and process group) that started it.
  setsid nohup $(need_sudo) dockerd --host=unix:///var/run/docker.sock --storage-driver=overlay2 \
    --dns 127.0.0.1 --shutdown-timeout 3 >"$DOCKERD_LOG" 2>&1 &
  for _ in $(seq 1 300); do
    if docker info >/dev/null 2>&1; then return; fi
    sleep 0.1
  done
  say "dockerd did not answer within 30 s; see $DOCKERD_LOG"; tail -20 "$DOCKERD_LOG" >&2
  exit 1
}

install_packages
create_venv
compile_sources
start_dockerd
