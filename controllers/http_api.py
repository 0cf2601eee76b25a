"""The common ground of our HTTP service clients (RTVI, VST): one connection pool per client,
every call counted (for metrics and "no request storm" checks), transport failures turned into
the client's own Temporary error naming the service and the call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from controllers import httpclients
from controllers.errors import TemporaryError
from controllers.frames import redact

Counter = Callable[[str], None]
HTTP_TIMEOUT_S = 15.0


class ApiClient:
    """Base of a typed client for one service at ``base_url``."""

    service = "service"
    unavailable: type[TemporaryError] = TemporaryError

    def __init__(self, base_url: str, timeout_s: float = HTTP_TIMEOUT_S,
                 count: Counter | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpclients.client(timeout_s)
        self._count = count or (lambda _what: None)

    def close(self) -> None:
        self._http.close()

    def _request(self, what: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self._count(what)
        try:
            return self._http.request(method, self.base_url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise self.unavailable(redact(f"{self.service} at {self.base_url}: {what} failed: "
                                          f"{type(exc).__name__}: {exc}")) from exc
