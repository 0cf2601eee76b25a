"""Fixtures of the end-to-end tests (the CLI and the daemon against a real Docker engine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.daemon_helpers import DaemonProcess


@pytest.fixture(autouse=True)
def no_daemon_outlives_its_test() -> Iterator[None]:
    """A daemon left running by a failed test would go on acting on the engine (runs, their
    containers) under the next tests; kill it and show its log."""
    yield
    for log in DaemonProcess.reap():
        print(f"--- daemon left running by the test, killed ---\n{log}")
