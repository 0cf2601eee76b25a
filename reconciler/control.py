"""The daemon's local control endpoint: HTTP over a Unix socket in the state directory.

A Unix socket (mode 0600 in a 0700 directory) keeps control local to the machine and to the
user who runs the daemon, with no port to allocate or protect. Endpoints:
``GET /health`` (200 when every daemon thread runs, 503 when one died), ``GET /status``
(daemon summary + every recorded resource), ``POST /sync`` (optionally
``?approve-prune=REVISION``: let that revision through the prune guard once), ``POST /ask``
(``?resource=KIND/NAME&request=NAME&value=TEXT``: what a person asks of one resource,
``reconciler promote``; 409 when its kind refuses it).
"""

from __future__ import annotations

import contextlib
import json
import os
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import httpx
import structlog

from state.errors import StateError
from state.keys import InvalidKey, Key
from state.models import ResourceStatus
from state.store import SOCKET_NAME, Store

CLIENT_TIMEOUT_S = 10.0

log = structlog.get_logger("reconciler.control")


class ControlUnavailable(Exception):
    """No daemon answers on the control socket."""


class RequestRefused(Exception):
    """The resource cannot take what was asked of it (its kind says why)."""


def ask(store: Store, resource: Key, request: str, value: str) -> str:
    """Record that a person asks ``request`` (``value``) of ``resource`` in its record, after
    its kind's facts judged it (``Facts.refuses``); what was recorded, in words. Kind-blind:
    the record's kind decides what it takes, and acts on it in its next pass."""
    from controllers.facts import Facts

    record = store.load(resource)
    if record is None:
        raise RequestRefused(f"{resource} has no record: nothing of it runs")
    facts = Facts.for_kind(record.kind)
    why = (facts.of(record).refuses(request, value) if facts is not None
           else f"it takes no {request} request")
    if why is not None:
        raise RequestRefused(f"{resource} cannot take {request} now: {why}")

    def mutate(st: ResourceStatus) -> None:
        st.requests[request] = value
    store.update(resource, mutate)
    return f"{resource}: {request} {value} recorded; its next pass acts on it".replace(
        "  ", " ")


class Controlled(Protocol):
    """What the endpoint asks of the daemon (a protocol, so that this module does not import
    the daemon that owns it)."""

    def healthy(self) -> bool: ...

    def describe(self) -> dict[str, Any]: ...

    def records(self) -> list[ResourceStatus]:
        """Every recorded resource (StateError when the state directory cannot be read)."""
        ...

    def approve_prune(self, revision: str) -> None: ...

    def ask(self, resource: Key, request: str, value: str) -> str:
        """Record what a person asks of ``resource`` and look at it now; RequestRefused."""
        ...

    def sync(self) -> None: ...


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    reconciler: Controlled

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that left before its answer (a ``health`` that timed out while the daemon
        was stopped with SIGSTOP, then continued) is no error of ours: socketserver would
        print a traceback to the daemon's stderr for it."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        log.exception("control.request_failed")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        daemon = self.server.reconciler
        if self.path == "/health":
            ok = daemon.healthy()
            self._send(200 if ok else 503, {"ok": ok, **daemon.describe()})
        elif self.path == "/status":
            try:
                records = [r.model_dump(mode="json") for r in daemon.records()]
            except StateError as exc:  # say what is wrong rather than drop the connection
                self._send(500, {"code": "StateError", "message": str(exc)})
                return
            self._send(200, {"daemon": daemon.describe(), "resources": records})
        else:
            self._send(404, {"code": "NotFound", "message": self.path})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/sync":
            approve = parse_qs(url.query).get("approve-prune", [])
            for revision in approve:
                self.server.reconciler.approve_prune(revision)
            self.server.reconciler.sync()
            message = "sync requested"
            if approve:
                message += f"; revision {approve[0]} may prune once"
            self._send(202, {"ok": True, "message": message})
        elif url.path == "/ask":
            query = {k: v[0] for k, v in parse_qs(url.query).items() if v}
            try:
                resource = Key.parse(query.get("resource", ""))
                said = self.server.reconciler.ask(resource, query.get("request", ""),
                                                  query.get("value", ""))
            except (InvalidKey, RequestRefused, StateError) as exc:
                self._send(409, {"code": type(exc).__name__, "message": str(exc)})
                return
            self._send(202, {"ok": True, "message": said})
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
    def __init__(self, state_dir: Path, daemon: Controlled) -> None:
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


def request(state_dir: Path, method: str, path: str,
            params: dict[str, str] | None = None) -> dict[str, Any]:
    """Call the live daemon; ControlUnavailable when none runs on this state directory."""
    sock = state_dir / SOCKET_NAME
    if not sock.exists():
        raise ControlUnavailable(f"no reconciler daemon is running on {state_dir} "
                                 f"(no {SOCKET_NAME}); start one with `reconciler run`")
    transport = httpx.HTTPTransport(uds=str(sock))
    try:
        with httpx.Client(transport=transport, timeout=CLIENT_TIMEOUT_S) as client:
            response = client.request(method, f"http://reconciler{path}", params=params)
    except httpx.HTTPError as exc:
        raise ControlUnavailable(f"the reconciler daemon on {state_dir} does not answer: "
                                 f"{exc}") from exc
    try:
        data: dict[str, Any] = response.json()
    except ValueError as exc:
        raise ControlUnavailable(f"the reconciler daemon on {state_dir} answered "
                                 f"{response.status_code} without JSON") from exc
    if response.status_code >= 500 and data.get("code") == "StateError":
        raise ControlUnavailable(f"the reconciler daemon on {state_dir} cannot read its "
                                 f"state: {data.get('message')}")
    return data
