"""Caption results as RTVI sends them, read into one shape whichever shape they came in.

``POST /v1/generate_captions`` answers (as SSE ``data:`` events when streaming, or as one body)
in shapes that differ between releases, and the published OpenAPI describes only one of them:

- **wrapped** — ``VlmCaptionsCompletionResponse``: ``{id, created, model, media_info, usage,
  chunk_responses: [{chunk_id, start_time, end_time, content, chunk_latency_ms, frame_count,
  ...}]}`` (the spec's shape; no ``choices``);
- **flat** — one chunk's fields at the top level of the event (what servers stream in practice);
- **chat** — an OpenAI-style ``choices[0].delta.content`` (or ``.message.content``).

A wrapped event's ``media_info.end_timestamp`` (a live chunk's last frame, as the source stamped
it) goes with each of its chunks: with the time the reader received it, it is the chunk's
latency as the VSS harness measures it (``ledger.chunk_latency``).

A client that reads only one shape silently drops every caption of the others (a StreamSet then
shows Degraded with frames flowing), so every reader goes through :func:`chunks_of`. It is pure
and never raises: a malformed event yields no chunk (or a chunk carrying ``error``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CaptionChunk:
    """One chunk's result. ``error``: the service reported a failure inside a 200 answer."""

    content: str
    chunk_id: int | None = None
    start_time: str | None = None
    end_time: str | None = None
    frame_count: int | None = None
    chunk_latency_ms: float | None = None
    error: str = ""
    end_timestamp: str | None = None  # media_info.end_timestamp of a timestamp chunk
    received_unix: float | None = None  # when the reader got it (set by the reader)


def chunks_of(event: object) -> list[CaptionChunk]:
    """Every chunk result in one event or response body, in order."""
    if not isinstance(event, dict):
        return []
    error = _error(event)
    wrapped = event.get("chunk_responses")
    if isinstance(wrapped, list):
        stamp = _end_timestamp(event.get("media_info"))
        found = [_chunk(item, error, stamp) for item in wrapped if isinstance(item, dict)]
        if found or not error:
            return found
    if "content" in event:
        return [_chunk(event, error, _end_timestamp(event.get("media_info")))]
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        first = choices[0]
        part = first.get("delta") or first.get("message") or {}
        text = part.get("content") if isinstance(part, dict) else None
        return [CaptionChunk(content=text if isinstance(text, str) else "", error=error)]
    return [CaptionChunk(content="", error=error)] if error else []


def _end_timestamp(info: object) -> str | None:
    """A live chunk's ``media_info.end_timestamp`` (only ``type: timestamp`` carries one)."""
    if not isinstance(info, dict) or info.get("type") != "timestamp":
        return None
    stamp = info.get("end_timestamp")
    return stamp if isinstance(stamp, str) and stamp else None


def _chunk(raw: dict[str, Any], error: str, stamp: str | None) -> CaptionChunk:
    content = raw.get("content")
    return CaptionChunk(
        content=content if isinstance(content, str) else "",
        chunk_id=_int(raw.get("chunk_id")),
        start_time=_text(raw.get("start_time")),
        end_time=_text(raw.get("end_time")),
        frame_count=_int(raw.get("frame_count")),
        chunk_latency_ms=_number(raw.get("chunk_latency_ms")),
        error=_error(raw) or error,
        end_timestamp=stamp,
    )


def _error(raw: dict[str, Any]) -> str:
    """An error reported inside a 200: ``error`` as text or as ``{code, message}``."""
    value = raw.get("error")
    if isinstance(value, dict):  # an empty object says nothing went wrong
        return ": ".join(str(value[k]) for k in ("code", "message") if value.get(k))
    return str(value) if value else ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, str | int | float) and value != "" else None
