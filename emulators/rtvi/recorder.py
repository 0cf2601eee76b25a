"""What went over the wire: every ``/v1/`` exchange, for contract tests (``RTVI_EMU_RECORD``).

Why: a conformance test must validate what the emulator actually sent and accepted -- not what a
test believes it sent -- against the published OpenAPI, and the product's end-to-end tests can
run every exchange they caused through the same validator. One JSON object per exchange:

``{"seq", "time", "method", "path", "query", "status", "request_content_type",
"request_body", "response_content_type", "response_body", "events"}``

- ``request_body``: the parsed JSON body; for a form (multipart or URL-encoded) the form as
  ``{name: text}`` with file parts as a placeholder string (``"<N bytes>"``); ``null`` when empty
  or unparseable (``request_raw`` then holds up to 1 KiB of it, for a 422's post-mortem).
- ``response_body``: the parsed JSON body, else ``null`` (Prometheus text, file content).
- ``events``: for a streamed (SSE) answer, each ``data:`` payload parsed as JSON, or the literal
  string for non-JSON payloads such as ``[DONE]``; absent otherwise.

Credentials never reach the record: headers are not recorded (the bearer token lives there),
``password`` values become ``"redacted"`` and URL user-info ``redacted@``, in request and response
alike. Exchanges are appended (one line each, flushed) to the knob's file and the last
``MAX_EXCHANGES`` are kept in memory for ``GET /emulator/exchanges``.
"""

from __future__ import annotations

import collections
import email.parser
import email.policy
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

MAX_EXCHANGES = 10_000
MAX_EVENTS = 10_000
MAX_RAW = 1024
REDACTED = "redacted"
SECRET_KEYS = frozenset({"password"})
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def redact(value: object) -> object:
    """A copy of ``value`` without credentials."""
    if isinstance(value, dict):
        return {
            key: REDACTED if key in SECRET_KEYS and isinstance(item, str) and item else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _USERINFO.sub(f"{REDACTED}@", value)
    return value


def parse_body(content_type: str, body: bytes) -> tuple[object, str | None]:
    """(parsed body or None, raw excerpt when it could not be parsed)."""
    if not body:
        return None, None
    lowered = content_type.lower()
    if lowered.startswith("application/x-www-form-urlencoded"):
        return dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"))), None
    if lowered.startswith("multipart/form-data"):
        form = _form(content_type, body)
        return (form, None) if form is not None else (None, "<malformed multipart>")
    try:
        return json.loads(body.decode("utf-8")), None
    except (ValueError, UnicodeDecodeError):
        return None, body[:MAX_RAW].decode("utf-8", "replace")


def _form(content_type: str, body: bytes) -> dict[str, str] | None:
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        return None
    form: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if part.get_filename() is not None:
            form[name] = f"<{len(data)} bytes>"
        else:
            form[name] = data.decode("utf-8", "replace")
    return form


def sse_payloads(data: bytes) -> list[str]:
    """The ``data:`` payloads in one written SSE piece (the emulator writes whole events)."""
    payloads = []
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            payloads.append(line[len("data:") :].strip())
    return payloads


def parse_event(payload: str) -> object:
    try:
        return json.loads(payload)
    except ValueError:
        return payload


class Recorder:
    """Appends exchanges to a file and a bounded in-memory log; thread-safe."""

    def __init__(self, path: str | None) -> None:
        self._path = Path(path) if path else None
        self._lock = threading.Lock()
        self._memory: collections.deque[dict[str, object]] = collections.deque(
            maxlen=MAX_EXCHANGES
        )
        self._seq = 0
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._path.touch()

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def record(
        self,
        method: str,
        path: str,
        query: Mapping[str, list[str]],
        request: tuple[str, bytes],
        status: int,
        response: tuple[str, bytes],
        events: list[str] | None,
    ) -> None:
        if self._path is None:
            return
        request_type, request_body = request
        response_type, response_body = response
        parsed, raw = parse_body(request_type, request_body)
        answer: object = None
        if response_type.lower().startswith("application/json") and response_body:
            answer, _ = parse_body(response_type, response_body)
        exchange: dict[str, object] = {
            "time": time.time(),
            "method": method,
            "path": path,
            "query": {key: list(values) for key, values in query.items()},
            "status": status,
            "request_content_type": request_type,
            "request_body": redact(parsed),
            "response_content_type": response_type,
            "response_body": redact(answer),
        }
        if raw is not None:
            exchange["request_raw"] = redact(raw)
        if events is not None:
            exchange["events"] = [redact(parse_event(p)) for p in events[:MAX_EVENTS]]
        with self._lock:
            self._seq += 1
            exchange["seq"] = self._seq
            self._memory.append(exchange)
            with self._path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(exchange, separators=(",", ":")) + "\n")

    def exchanges(self) -> list[dict[str, object]]:
        with self._lock:
            return list(self._memory)

    def clear(self) -> None:
        """Forget the in-memory log (the file keeps everything)."""
        with self._lock:
            self._memory.clear()
