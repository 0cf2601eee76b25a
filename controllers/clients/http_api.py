"""The common ground of our HTTP service clients (RTVI, VST): one connection pool per client,
every call counted (for metrics and "no request storm" checks), transport failures turned into
the client's own Temporary error naming the service and the call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from controllers.clients import httpclients
from controllers.errors import TemporaryError
from state.redaction import redact_urls

Counter = Callable[[str], None]
HTTP_TIMEOUT_S = 15.0
C = TypeVar("C", bound="ApiClient")


class ApiClient:
    """Base of a typed client for one service at ``base_url``."""

    service = "service"
    unavailable: type[TemporaryError] = TemporaryError

    def __init__(self, base_url: str, timeout_s: float = HTTP_TIMEOUT_S,
                 count: Counter | None = None, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpclients.client(timeout_s, token)
        self._count = count or (lambda _what: None)
        self._pooled = False

    def close(self) -> None:
        """Done with it; a client lent by a :class:`ClientPool` stays open for the pass."""
        if not self._pooled:
            self._http.close()

    def _request(self, what: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self._count(what)
        try:
            return self._http.request(method, self.base_url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise self.unavailable(redact_urls(f"{self.service} at {self.base_url}: {what} failed: "
                                          f"{type(exc).__name__}: {exc}")) from exc


class ClientPool:
    """One client per service per pass, shared by every step and thread of the pass.

    A StreamSet pass talks to the same RTVI and VST from its plan, its registration, its
    teardown and its checks; a client each time means a new connection each time. The pool
    lends one client per (kind of client, URL) — httpx clients may be shared between
    threads — and closes them all when the pass ends (``close``). A client it lends ignores
    ``close()``, so code written for a client of its own works unchanged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[type[ApiClient], str, str | None], ApiClient] = {}
        self._tokens: dict[str, str | None] = {}

    def authorize(self, base_url: str, token: str | None) -> None:
        """Requests to ``base_url`` carry this bearer token (a service's ``apiTokenSecret``;
        None: none). Clients lent later use it; one lent before keeps the token it had."""
        with self._lock:
            self._tokens[base_url] = token

    def token(self, base_url: str) -> str | None:
        with self._lock:
            return self._tokens.get(base_url)

    def get(self, cls: type[C], base_url: str, count: Counter | None = None) -> C:
        with self._lock:
            token = self._tokens.get(base_url)
            client = self._clients.get((cls, base_url, token))
            if client is None:
                client = cls(base_url, count=count, token=token)
                client._pooled = True
                self._clients[(cls, base_url, token)] = client
            assert isinstance(client, cls)
            return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client._http.close()


def service_url(address: str, port: int) -> str:
    """Where to reach a port published on ``address`` from this machine."""
    if address in ("0.0.0.0", "::"):
        address = "127.0.0.1" if address == "0.0.0.0" else "::1"
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"
