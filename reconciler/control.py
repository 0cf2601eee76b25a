"""The daemon's local control endpoint: HTTP over a Unix socket in the state directory.

A Unix socket (mode 0600 in a 0700 directory) keeps control local to the machine and to the
user who runs the daemon, with no port to allocate or protect. Endpoints:
``GET /health``, ``GET /status`` (daemon summary + every recorded resource), ``POST /sync``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from reconciler.daemon import Daemon

SOCKET_NAME = "control.sock"
CLIENT_TIMEOUT_S = 10.0


class ControlUnavailable(Exception):
    """No daemon answers on the control socket."""


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    reconciler: Daemon


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        daemon = self.server.reconciler
        if self.path == "/health":
            self._send(200, {"ok": True, **daemon.describe()})
        elif self.path == "/status":
            records = [r.model_dump(mode="json") for r in daemon.store.list()]
            self._send(200, {"daemon": daemon.describe(), "resources": records})
        else:
            self._send(404, {"code": "NotFound", "message": self.path})

    def do_POST(self) -> None:
        if self.path == "/sync":
            self.server.reconciler.sync()
            self._send(202, {"ok": True, "message": "sync requested"})
        else:
            self._send(404, {"code": "NotFound", "message": self.path})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are not worth a log line each


class ControlServer:
    def __init__(self, state_dir: Path, daemon: Daemon) -> None:
        self.path = state_dir / SOCKET_NAME
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale socket of a killed daemon (we hold the lock)
        self._server = _Server(str(self.path), _Handler)
        os.chmod(self.path, 0o600)
        self._server.reconciler = daemon
        self._thread = threading.Thread(target=self._server.serve_forever, name="control",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def request(state_dir: Path, method: str, path: str) -> dict[str, Any]:
    """Call the live daemon; ControlUnavailable when none runs on this state directory."""
    sock = state_dir / SOCKET_NAME
    if not sock.exists():
        raise ControlUnavailable(f"no reconciler daemon is running on {state_dir} "
                                 f"(no {SOCKET_NAME}); start one with `reconciler run`")
    transport = httpx.HTTPTransport(uds=str(sock))
    try:
        with httpx.Client(transport=transport, timeout=CLIENT_TIMEOUT_S) as client:
            response = client.request(method, f"http://reconciler{path}")
    except httpx.HTTPError as exc:
        raise ControlUnavailable(f"the reconciler daemon on {state_dir} does not answer: "
                                 f"{exc}") from exc
    data: dict[str, Any] = response.json()
    return data
