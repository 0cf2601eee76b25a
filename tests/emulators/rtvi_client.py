"""Small HTTP helpers for the stream, caption and admin tests of the RTVI emulator.

Plain httpx against the emulator's loopback port (proxies ignored); SSE is read line by line from
a live response, so a test sees chunks as the emulator sends them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.emulators.helpers import EmulatorProcess, wait_for

LONG_TIMEOUT = httpx.Timeout(30.0)
MODEL = "emulated-vlm"


def client(emulator: EmulatorProcess) -> httpx.Client:
    return httpx.Client(base_url=emulator.base_url, timeout=LONG_TIMEOUT, trust_env=False)


def new_id() -> str:
    return str(uuid.uuid4())


def entry(
    url: str, stream_id: str | None = None, description: str = "test stream"
) -> dict[str, str]:
    value = {"liveStreamUrl": url, "description": description}
    if stream_id is not None:
        value["id"] = stream_id
    return value


def add(http: httpx.Client, *entries: dict[str, str]) -> httpx.Response:
    return http.post("/v1/streams/add", json={"streams": list(entries)})


def listed_ids(http: httpx.Client) -> set[str]:
    response = http.get("/v1/streams/get-stream-info")
    assert response.status_code == 200, response.text
    return {item["id"] for item in response.json()}


def wait_decoding(http: httpx.Client, *stream_ids: str, frames: int = 2) -> None:
    """Poll the admin state until every stream's decoder has delivered ``frames`` frames."""

    def probe() -> bool | None:
        streams = {s["id"]: s for s in http.get("/emulator/state").json()["streams"]}
        done = all(streams.get(i, {}).get("frame_count", 0) >= frames for i in stream_ids)
        return True if done else None

    wait_for(probe, timeout=30.0, what=f"{frames} decoded frames on {stream_ids}")


def caption_body(ids: str | list[str], **extra: object) -> dict[str, Any]:
    return {"id": ids, "prompt": "Describe the frame.", "model": MODEL, **extra}


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any] | str]:
    """Parsed ``data:`` payloads; the literal ``"[DONE]"`` for the end marker."""
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        payload = line[len("data: ") :]
        if payload == "[DONE]":
            yield "[DONE]"
            return
        yield json.loads(payload)


def child_pids(pid: int) -> set[int]:
    """Direct children of ``pid`` (from /proc), e.g. an emulator's ffmpeg decoders."""
    children: set[int] = set()
    for entry_path in Path("/proc").iterdir():
        if not entry_path.name.isdigit():
            continue
        try:
            stat = (entry_path / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            children.add(int(entry_path.name))
    return children


def alive(pid: int) -> bool:
    """True for a running (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def first_events(http: httpx.Client, body: dict[str, Any],
                 count: int) -> list[dict[str, Any]]:
    """The first ``count`` JSON events of a streamed ``generate_captions`` (then hang up)."""
    events: list[dict[str, Any]] = []
    with http.stream("POST", "/v1/generate_captions", json=body) as response:
        assert response.status_code == 200
        for event in sse_events(response):
            assert isinstance(event, dict)
            events.append(event)
            if len(events) >= count:
                break
    return events


def chunk_of(event: dict[str, Any]) -> dict[str, Any]:
    """The one chunk an event or body carries, whichever shape it came in: a wrapped event's
    ``chunk_responses[0]`` (with the wrapper's ``error`` and ``media_info``), or a flat one."""
    inner = event.get("chunk_responses")
    if not isinstance(inner, list):
        return event
    assert len(inner) == 1, event
    chunk: dict[str, Any] = dict(inner[0])
    for key in ("error", "media_info"):
        if key in event:
            chunk[key] = event[key]
    return chunk


def first_chunks(http: httpx.Client, body: dict[str, Any],
                 count: int) -> list[dict[str, Any]]:
    """:func:`first_events`, each read as its one chunk."""
    return [chunk_of(event) for event in first_events(http, body, count)]
