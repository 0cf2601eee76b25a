"""Typed client for the RT-VLM (RTVI) service's stream and caption API (contracts/rtvi-api.md).

Why a client of our own rather than calls scattered through the controller: every answer of this
API needs the same care -- partial success inside a 200, duplicates reported as 409 either as the
status or inside ``errors``, 503 ``ServerBusy`` meaning "back off", a failed list that must never
read as "no streams", older servers that refuse the ``blocking`` fields with 422 -- and it is
easier to get that right once. httpx stays behind this module.

Error mapping (controllers/errors.py): transport failures and 5xx are ``RtviUnavailable``
(temporary); 503 ``ServerBusy`` is ``RtviBusy`` (temporary, and the controller reports a capacity
condition); other 4xx are ``RtviRejected`` (permanent until the spec changes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from controllers.clients.http_api import HTTP_TIMEOUT_S, ApiClient
from controllers.errors import PermanentError, TemporaryError
from state.redaction import redact_urls

# Adding streams starts a decoder per stream; a loaded server takes a while for 256 of them.
ADD_TIMEOUT_S = 60.0
# A blocking batch delete returns after the drain window: wait that long and then some.
DELETE_MARGIN_S = 30.0
MAX_BATCH = 256  # streams/add and delete-batch take 1..256 IDs
BUSY_CODE = "ServerBusy"
DUPLICATE_CODE = "DuplicateStreamId"
IN_USE_CODE = "ResourceInUse"


class RtviUnavailable(TemporaryError):
    """The service did not answer, or answered 5xx."""


class RtviBusy(RtviUnavailable):
    """503 ServerBusy: at capacity. Back off; do not hammer."""


class RtviRejected(PermanentError):
    """A 4xx other than the ones handled in place: the request itself is wrong."""


@dataclass(frozen=True)
class StreamInfo:
    id: str
    url: str
    description: str


@dataclass(frozen=True)
class ItemError:
    """One entry of an ``errors`` list (add or delete-batch)."""

    id: str
    code: str
    message: str
    status: int

    @property
    def busy(self) -> bool:
        return self.code == BUSY_CODE or self.status == httpx.codes.SERVICE_UNAVAILABLE

    @property
    def duplicate(self) -> bool:
        return self.code == DUPLICATE_CODE or self.status == httpx.codes.CONFLICT

    @property
    def gone(self) -> bool:
        """Delete errors that mean "already gone" (400/404)."""
        return self.status in (httpx.codes.BAD_REQUEST, httpx.codes.NOT_FOUND)


@dataclass
class BatchResult:
    done: list[str] = field(default_factory=list)
    errors: list[ItemError] = field(default_factory=list)


@dataclass(frozen=True)
class ChatAnswer:
    content: str
    finish_reason: str | None
    raw: dict[str, Any]  # the whole answer, kept as evidence (redacted when written)


class RtviClient(ApiClient):
    """One RT-VLM service at ``base_url`` (``http://host:port``)."""

    service = "RTVI"
    unavailable = RtviUnavailable

    def _fail(self, what: str, response: httpx.Response) -> RtviUnavailable | RtviRejected:
        code, message = _error_body(response)
        text = f"RTVI at {self.base_url}: {what} answered {response.status_code}"
        text += f" {code}: {message}" if code or message else ""
        text = redact_urls(text)  # an echoed URL may carry credentials
        if code == BUSY_CODE or response.status_code == httpx.codes.SERVICE_UNAVAILABLE:
            return RtviBusy(text)
        if response.status_code >= httpx.codes.INTERNAL_SERVER_ERROR:
            return RtviUnavailable(text)
        return RtviRejected(text)

    def _get(self, what: str, path: str, shape: type) -> Any:
        """GET a JSON body of ``shape``; anything else raises (an error is never "empty")."""
        response = self._request(what, "GET", path)
        if response.status_code != httpx.codes.OK:
            raise self._fail(what, response)
        body = _json(response)
        if not isinstance(body, shape):
            raise RtviUnavailable(f"RTVI at {self.base_url}: {what} returned "
                                  f"{type(body).__name__}, not a {shape.__name__}")
        return body

    # --- streams -------------------------------------------------------------------------------

    def list_streams(self) -> list[StreamInfo]:
        """Every registered stream. Any failure raises: an error is never "no streams"."""
        body = self._get("list streams", "/v1/streams/get-stream-info", list)
        return [StreamInfo(str(s.get("id", "")), str(s.get("liveStreamUrl", "")),
                           str(s.get("description", ""))) for s in body if isinstance(s, dict)]

    def add_streams(self, entries: list[dict[str, str]]) -> BatchResult:
        """Register up to 256 streams with caller-chosen IDs; partial success is normal."""
        if not 1 <= len(entries) <= MAX_BATCH:
            raise ValueError(f"add_streams takes 1..{MAX_BATCH} entries, got {len(entries)}")
        response = self._request("add streams", "POST", "/v1/streams/add",
                                 json={"streams": entries}, timeout=ADD_TIMEOUT_S)
        wanted = [e["id"] for e in entries]
        if response.status_code == httpx.codes.CONFLICT:  # every entry a duplicate
            code, message = _error_body(response)
            return BatchResult([], [ItemError(i, code or DUPLICATE_CODE, message, 409)
                                    for i in wanted])
        if response.status_code != httpx.codes.OK:
            raise self._fail("add streams", response)
        body = _json(response)
        done = [str(r.get("id")) for r in body.get("results", []) if isinstance(r, dict)]
        return BatchResult(done, [_item_error(e) for e in body.get("errors", [])])

    def delete_batch(self, ids: list[str], drain_timeout_s: int) -> BatchResult:
        """One blocking batch delete (≤256 IDs); retried without the blocking fields when an
        older server refuses them with 422."""
        if not 1 <= len(ids) <= MAX_BATCH:
            raise ValueError(f"delete_batch takes 1..{MAX_BATCH} IDs, got {len(ids)}")
        body: dict[str, Any] = {"stream_ids": ids, "blocking": True,
                                "drain_timeout_seconds": drain_timeout_s}
        timeout = drain_timeout_s + DELETE_MARGIN_S
        response = self._request("delete streams", "DELETE", "/v1/streams/delete-batch",
                                 content=json.dumps(body), timeout=timeout,
                                 headers={"content-type": "application/json"})
        if response.status_code == httpx.codes.UNPROCESSABLE_ENTITY:
            response = self._request("delete streams", "DELETE", "/v1/streams/delete-batch",
                                     content=json.dumps({"stream_ids": ids}), timeout=timeout,
                                     headers={"content-type": "application/json"})
        if response.status_code != httpx.codes.OK:
            raise self._fail("delete streams", response)
        result = _json(response)
        return BatchResult([str(i) for i in result.get("deleted", [])],
                           [_item_error(e) for e in result.get("errors", [])])

    # --- captions ------------------------------------------------------------------------------

    def caption_events(self, body: dict[str, Any], read_timeout_s: float) -> Iterator[dict[str,
                                                                                        Any]]:
        """Open a streaming caption request and yield each chunk response until ``[DONE]`` or
        the connection ends. Raises RtviBusy on 503, RtviRejected on other 4xx."""
        self._count("generate captions")
        timeout = httpx.Timeout(HTTP_TIMEOUT_S, read=read_timeout_s)
        try:
            with self._http.stream("POST", self.base_url + "/v1/generate_captions", json=body,
                                   timeout=timeout) as response:
                if response.status_code != httpx.codes.OK:
                    response.read()
                    raise self._fail("generate captions", response)
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[len("data:"):].strip()
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    if isinstance(event, dict):
                        yield event
        except httpx.HTTPError as exc:
            raise RtviUnavailable(f"RTVI at {self.base_url}: caption stream ended: "
                                  f"{type(exc).__name__}: {exc}") from exc

    def stop_captions(self, stream_id: str) -> None:
        """Stop captioning on a stream; 404 (none active) is fine."""
        response = self._request("stop captions", "DELETE", f"/v1/generate_captions/{stream_id}")
        if response.status_code not in (httpx.codes.OK, httpx.codes.NOT_FOUND):
            raise self._fail("stop captions", response)

    def asset_stats(self) -> dict[str, Any]:
        """``GET /v1/assets/stats``: asset counts (its shape is not published; callers read it
        defensively). Cleanup proves "zero assets" with it."""
        body: dict[str, Any] = self._get("asset stats", "/v1/assets/stats", dict)
        return body

    # --- files and chat ------------------------------------------------------------------------

    def list_files(self) -> list[str]:
        """``GET /v1/files?purpose=vision``: the IDs of the service's files (a published
        listing: what proves "no file left" where asset stats say nothing)."""
        body = self._get("list files", "/v1/files?purpose=vision", dict)
        data = body.get("data")
        if not isinstance(data, list):
            raise RtviUnavailable(f"RTVI at {self.base_url}: list files answered without data")
        return [str(item.get("id")) for item in data if isinstance(item, dict)]

    def upload_file(self, name: str, data: bytes, media_type: str) -> str:
        """``POST /v1/files`` (purpose ``vision``); the new file's ID."""
        response = self._request("upload file", "POST", "/v1/files",
                                 data={"purpose": "vision", "media_type": media_type},
                                 files={"file": (name, data)}, timeout=ADD_TIMEOUT_S)
        if response.status_code != httpx.codes.OK:
            raise self._fail("upload file", response)
        body = _json(response)
        file_id = body.get("id") if isinstance(body, dict) else None
        if not isinstance(file_id, str) or not file_id:
            raise RtviUnavailable(f"RTVI at {self.base_url}: upload file answered without an id")
        return file_id

    def delete_file(self, file_id: str) -> None:
        """``DELETE /v1/files/{id}``; a file the service does not know (400) is already gone,
        one still in use (409) raises."""
        response = self._request("delete file", "DELETE", f"/v1/files/{file_id}")
        if response.status_code == httpx.codes.BAD_REQUEST:
            return
        if response.status_code != httpx.codes.OK:
            raise self._fail("delete file", response)

    def chat(self, body: dict[str, Any], timeout_s: float) -> ChatAnswer:
        """One non-streaming ``/v1/chat/completions`` request: the first choice's text."""
        response = self._request("chat completion", "POST", "/v1/chat/completions", json=body,
                                 timeout=timeout_s)
        if response.status_code != httpx.codes.OK:
            raise self._fail("chat completion", response)
        raw = _json(response)
        choices = raw.get("choices") if isinstance(raw, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else {}
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise RtviUnavailable(f"RTVI at {self.base_url}: chat completion answered without "
                                  "choices[0].message.content")
        finish = first.get("finish_reason")
        return ChatAnswer(content, finish if isinstance(finish, str) else None,
                          raw if isinstance(raw, dict) else {})

    def model_id(self) -> str:
        response = self._request("models", "GET", "/v1/models")
        if response.status_code != httpx.codes.OK:
            raise self._fail("models", response)
        data = _json(response).get("data") or []
        if not data:
            raise RtviUnavailable(f"RTVI at {self.base_url}: /v1/models lists no model")
        return str(data[0]["id"])


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise RtviUnavailable(f"RTVI answered {response.status_code} with a body that is not "
                              "JSON") from exc


def _error_body(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
    except ValueError:
        return "", response.text[:200]
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, dict):
            body = detail
        return str(body.get("code", "")), str(body.get("message", detail or ""))[:500]
    return "", str(body)[:200]


def _item_error(raw: Any) -> ItemError:
    item = raw if isinstance(raw, dict) else {"message": str(raw)}
    status = item.get("status_code", item.get("status", 0))
    return ItemError(
        id=str(item.get("id") or item.get("stream_id") or ""),
        code=str(item.get("code") or item.get("error_code") or ""),
        message=redact_urls(str(item.get("message") or item.get("error") or "")),
        status=int(status) if isinstance(status, int | str) and str(status).isdigit() else 0,
    )
