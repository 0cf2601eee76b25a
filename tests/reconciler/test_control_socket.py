"""The control socket outlives clients that leave early (issue 26: after SIGSTOP/SIGCONT, the
answers to ``health`` calls that had timed out printed BrokenPipe tracebacks)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from reconciler.control import ControlServer, request
from state.keys import Key
from state.models import ResourceStatus


class _Daemon:
    """Answers like a daemon; its summary is large (the answer cannot fit the socket buffer)
    and held until ``release`` is set, as a stopped daemon holds it."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def healthy(self) -> bool:
        return True

    def describe(self) -> dict[str, Any]:
        self.release.wait(10)
        return {"instance": "x", "padding": "y" * 4_000_000}

    def records(self) -> list[ResourceStatus]:
        return []

    def sync(self) -> None: ...

    def approve_prune(self, revision: str) -> None: ...

    def ask(self, resource: Key, request: str, value: str) -> str:
        return ""


def test_a_client_that_leaves_before_its_answer_leaves_no_traceback(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    daemon = _Daemon()
    server = ControlServer(tmp_path, daemon)
    server.start()
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(tmp_path / "control.sock"))
        client.sendall(b"GET /health HTTP/1.1\r\nHost: reconciler\r\n\r\n")
        client.close()  # gone before the answer, like a timed-out `reconciler health`
        daemon.release.set()
        # The server still answers the next client, and printed nothing.
        answer = request(tmp_path, "GET", "/health")
        assert answer["ok"] is True
    finally:
        server.close()
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err
    assert "BrokenPipe" not in captured.err
