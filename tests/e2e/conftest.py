"""Fixtures of the end-to-end tests (the CLI and the daemon against a real Docker engine)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.daemon_helpers import DaemonProcess


@pytest.fixture(autouse=True)
def no_daemon_outlives_its_test() -> Iterator[None]:
    """A daemon left running by a failed test would go on acting on the engine (runs, their
    containers) under the next tests; kill it and show its log."""
    yield
    for log in DaemonProcess.reap():
        print(f"--- daemon left running by the test, killed ---\n{log}")


@pytest.fixture
def gpu_board() -> Iterator[str]:
    """An emulated GPU (a DCGM exporter's ``/metrics``): its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "emulators.gpuboard", "--port", "0"],
                            stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the board says where it listens once it does
        assert line.startswith("listening on "), line
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
