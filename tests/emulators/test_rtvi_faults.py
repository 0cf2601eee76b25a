"""Behaviour faults for canary tests (``POST /emulator/faults`` with ``kind``), with real decoding.

Each fault makes a 200 answer wrong in one way a canary must catch; each test first shows the
healthy answer, then the faulty one, then (where it matters) the healthy one again after
``DELETE /emulator/faults``. Sources are distinct solid colours, so a caption that describes the
wrong stream's frames names the wrong colour.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.emulators import rtvi_client as rc
from tests.emulators.helpers import EmulatorProcess
from tests.emulators.rtsp_source import RtspSource

StartEmulator = Callable[..., EmulatorProcess]
RED = "The frame shows solid RED."
GREEN = "The frame shows solid GREEN."


def _two_streams(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> tuple[EmulatorProcess, str, str]:
    emulator = start_emulator(RTVI_EMU_LATENCY_MS="0")
    emulator.wait_ready()
    red, green = rc.new_id(), rc.new_id()
    with rc.client(emulator) as http:
        added = rc.add(http, rc.entry(rtsp_source.url("red"), red),
                       rc.entry(rtsp_source.url("green"), green))
        assert added.json()["errors"] == []
        rc.wait_decoding(http, red, green)
    return emulator, red, green


def _caption(http: httpx.Client, stream_id: str) -> dict[str, Any]:
    answer = http.post("/v1/generate_captions", json=rc.caption_body(stream_id, chunk_duration=1))
    assert answer.status_code == 200, answer.text
    return rc.chunk_of(answer.json())


def _stream(http: httpx.Client, stream_id: str, count: int) -> list[dict[str, Any]]:
    return rc.first_chunks(http, rc.caption_body(stream_id, stream=True, chunk_duration=1), count)


def _events(http: httpx.Client, stream_id: str, count: int) -> list[dict[str, Any]]:
    return rc.first_events(http, rc.caption_body(stream_id, stream=True, chunk_duration=1), count)


def _fault(http: httpx.Client, **fault: object) -> None:
    answer = http.post("/emulator/faults", json=fault)
    assert answer.status_code == 200, answer.text


def test_swap_captions_between_two_streams(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator, red, green = _two_streams(start_emulator, rtsp_source)
    with rc.client(emulator) as http:
        assert (_caption(http, red)["content"], _caption(http, green)["content"]) == (RED, GREEN)
        _fault(http, kind="swap_captions", streams=[red, green])
        assert (_caption(http, red)["content"], _caption(http, green)["content"]) == (GREEN, RED)
        assert http.delete("/emulator/faults").status_code == 200
        assert _caption(http, red)["content"] == RED
        bad = http.post("/emulator/faults", json={"kind": "swap_captions", "streams": [red]})
        assert bad.status_code == 422


def test_crosstalk_answers_each_stream_with_the_next_ones_frames(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    """Named by no stream ID: a release that mixes streams' answers, set before any exists."""
    emulator, red, green = _two_streams(start_emulator, rtsp_source)
    with rc.client(emulator) as http:
        _fault(http, kind="crosstalk")
        assert (_caption(http, red)["content"], _caption(http, green)["content"]) == (GREEN, RED)


def test_mix_captions_alternates_the_other_streams_frames(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator, red, green = _two_streams(start_emulator, rtsp_source)
    with rc.client(emulator) as http:
        _fault(http, kind="mix_captions", streams=[red, green])
        events = _stream(http, red, 4)
    assert [e["content"] for e in events] == [RED, GREEN, RED, GREEN]
    assert [e["chunk_id"] for e in events] == [0, 1, 2, 3]


def test_drop_chunk_ids_leaves_gaps(start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator, red, green = _two_streams(start_emulator, rtsp_source)
    with rc.client(emulator) as http:
        _fault(http, kind="drop_chunk_ids", skip=2, streams=[red])
        assert [e["chunk_id"] for e in _stream(http, red, 3)] == [0, 3, 6]
        assert [e["chunk_id"] for e in _stream(http, green, 2)] == [0, 1]  # not listed


def test_error_inside_a_200_event_in_both_shapes(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator, red, _green = _two_streams(start_emulator, rtsp_source)
    with rc.client(emulator) as http:
        [healthy] = _events(http, red, 1)
        assert "error" not in healthy
        _fault(http, kind="error_in_event")
        [wrapped] = _events(http, red, 1)  # the default shape
        assert wrapped["error"] == {"code": "InternalError",
                                    "message": "VLM inference failed for this chunk"}
        assert wrapped["chunk_responses"][0]["content"] == ""
        http.post("/emulator/knobs", json={"caption_shape": "flat"})
        [flat] = _events(http, red, 1)
        assert flat["error"] == wrapped["error"]
        assert flat["content"] == ""


def test_empty_content(start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator, red, green = _two_streams(start_emulator, rtsp_source)
    with rc.client(emulator) as http:
        _fault(http, kind="empty_content", streams=[green])
        empty = _caption(http, green)
        assert empty["content"] == ""
        assert empty["frame_count"] > 0
        assert "error" not in empty
        assert _caption(http, red)["content"] == RED


def test_stuck_delete_refuses_until_cleared(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = start_emulator(RTVI_EMU_DRAIN_S="0")
    emulator.wait_ready()
    stuck, other = rc.new_id(), rc.new_id()
    url = rtsp_source.url("no-such-mount")
    with rc.client(emulator) as http:
        rc.add(http, rc.entry(url, stuck), rc.entry(url, other))
        _fault(http, kind="stuck_delete", streams=[stuck])
        for _ in range(3):  # forever, not once
            refused = http.delete(f"/v1/streams/delete/{stuck}")
            assert refused.status_code == 409
            assert refused.json()["code"] == "ResourceInUse"
        batch = http.request("DELETE", "/v1/streams/delete-batch",
                             json={"stream_ids": [stuck, other], "blocking": True})
        assert batch.json()["deleted"] == [other]
        [error] = batch.json()["errors"]
        assert (error["stream_id"], error["error_code"], error["status_code"]) == (
            stuck, "ResourceInUse", 409)
        remove = {"key": stuck, "value": {"camera_id": stuck, "change": "remove"}}
        assert http.post("/v1/stream/remove", json=remove).status_code == 409
        assert rc.listed_ids(http) == {stuck}
        assert http.delete("/emulator/faults").status_code == 200
        assert http.delete(f"/v1/streams/delete/{stuck}").status_code == 200
        assert rc.listed_ids(http) == set()
