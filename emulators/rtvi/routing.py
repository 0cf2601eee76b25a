"""Request/response values and a small route table.

Why not ``http.server`` method dispatch directly: the contract has path parameters
(``/v1/streams/delete/{id}``), a fixed error shape (``{"code", "message"}``) for 404 and 405, and
metrics labelled by route template rather than raw path (bounded label cardinality). A table of
``(method, template) -> handler`` gives all three and lets each endpoint group register itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from emulators.rtvi.state import ServiceState

JSON_CONTENT_TYPE = "application/json"
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
UNMATCHED_ROUTE = "<unmatched>"  # metrics label for paths that match no route
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# ServiceError (the spec's error body): code ^[A-Za-z]*$ (<= 128), message ^[A-Za-z\-. ,_"']*$
# (<= 1024) -- no digits, colons or brackets. Messages are written in words and then cleaned.
_CODE_NOT_ALLOWED = re.compile(r"[^A-Za-z]")
_MESSAGE_INDEX = re.compile(r"\[\d+\]")
_MESSAGE_NOT_ALLOWED = re.compile(r"[^A-Za-z\-. ,_\"']+")
MAX_CODE_LEN = 128
MAX_MESSAGE_LEN = 1024


def service_code(code: str) -> str:
    return _CODE_NOT_ALLOWED.sub("", code)[:MAX_CODE_LEN]


def service_message(message: str) -> str:
    """``message`` reduced to what ServiceError allows: list indexes dropped, any other
    disallowed run (digits, colons, slashes, ...) becomes one space."""
    cleaned = _MESSAGE_NOT_ALLOWED.sub(" ", _MESSAGE_INDEX.sub("", message))
    return " ".join(cleaned.split())[:MAX_MESSAGE_LEN]


@dataclass(frozen=True)
class Request:
    """One parsed HTTP request, as handlers see it."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    params: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> object:
        """The body as JSON; raises ``ValueError`` when it is not valid JSON."""
        return json.loads(self.body.decode("utf-8"))


class StreamWriter(Protocol):
    """What a streaming body writes to: the client connection, chunk by chunk."""

    def write(self, data: bytes) -> bool:
        """Send ``data`` now; False when the client has gone."""

    def alive(self) -> bool:
        """False once the client closed its side (checked without blocking)."""


StreamBody = Callable[[StreamWriter], None]


@dataclass(frozen=True)
class Response:
    """What a handler returns; the server writes it with an exact Content-Length.

    A response with ``stream`` set (server-sent events) is written with chunked transfer coding
    instead: headers first, then whatever ``stream`` writes until it returns.
    """

    status: int
    body: bytes
    content_type: str = JSON_CONTENT_TYPE
    headers: tuple[tuple[str, str], ...] = ()
    stream: StreamBody | None = None

    @classmethod
    def json(cls, status: int, payload: object) -> Response:
        return cls(status, json.dumps(payload, separators=(",", ":")).encode("utf-8"))

    @classmethod
    def error(
        cls, status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> Response:
        """The spec's ``ServiceError``: ``{"code", "message"}``, both reduced to its patterns."""
        payload = {"code": service_code(code), "message": service_message(message)}
        body = json.dumps(payload, separators=(",", ":"))
        return cls(status, body.encode("utf-8"), JSON_CONTENT_TYPE, headers)

    @classmethod
    def streaming(
        cls, content_type: str, body: StreamBody, headers: tuple[tuple[str, str], ...] = ()
    ) -> Response:
        return cls(200, b"", content_type, headers, body)

    @classmethod
    def text(cls, status: int, text: str, content_type: str = TEXT_CONTENT_TYPE) -> Response:
        return cls(status, text.encode("utf-8"), content_type)


Handler = Callable[[ServiceState, Request], Response]


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    pattern: re.Pattern[str]
    handler: Handler


@dataclass(frozen=True)
class Match:
    """A route matched: the handler, its template (for metrics) and the path parameters."""

    route: Route
    params: dict[str, str]


@dataclass(frozen=True)
class MethodNotAllowed:
    """The path exists but not for this method; ``allowed`` feeds the ``Allow`` header."""

    template: str
    allowed: tuple[str, ...]


def _compile(template: str) -> re.Pattern[str]:
    parts: list[str] = []
    last = 0
    for found in _PARAM.finditer(template):
        parts.append(re.escape(template[last : found.start()]))
        parts.append(f"(?P<{found.group(1)}>[^/]+)")
        last = found.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts) + r"\Z")


class Router:
    """Routes in registration order; the first template that matches the path wins."""

    def __init__(self) -> None:
        self._routes: list[Route] = []

    def add(self, method: str, template: str, handler: Handler) -> None:
        method = method.upper()
        for route in self._routes:
            if route.method == method and route.template == template:
                raise ValueError(f"duplicate route {method} {template}")
        self._routes.append(Route(method, template, _compile(template), handler))

    def route(self, method: str, *templates: str) -> Callable[[Handler], Handler]:
        """Decorator: register ``handler`` for ``method`` on every template (aliases)."""

        def register(handler: Handler) -> Handler:
            for template in templates:
                self.add(method, template, handler)
            return handler

        return register

    def get(self, *templates: str) -> Callable[[Handler], Handler]:
        """Decorator: register ``handler`` for GET on every template (aliases)."""

        def register(handler: Handler) -> Handler:
            for template in templates:
                self.add("GET", template, handler)
            return handler

        return register

    def templates(self) -> list[tuple[str, str]]:
        return [(route.method, route.template) for route in self._routes]

    def resolve(self, method: str, path: str) -> Match | MethodNotAllowed | None:
        allowed: list[str] = []
        template = ""
        for route in self._routes:
            found = route.pattern.match(path)
            if found is None:
                continue
            if route.method == method:
                return Match(route, found.groupdict())
            if route.method not in allowed:
                allowed.append(route.method)
                template = template or route.template
        if allowed:
            return MethodNotAllowed(template, tuple(allowed))
        return None
