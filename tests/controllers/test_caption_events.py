"""Caption results are read alike in every shape RTVI sends them (the spec's wrapped one too)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

import pytest

from controllers.kinds.experiments.ledger import UnitOutcome, chunk_latency, performance_report
from controllers.kinds.streamset.caption_events import CaptionChunk, chunks_of

SPEC = Path(__file__).resolve().parents[1] / "contract" / "rtvi-openapi.json"  # ../shared/contracts

FLAT = {"id": "s1", "chunk_id": 4, "start_time": "2026-12-04T08:00:00Z",
        "end_time": "2026-12-04T08:00:05Z", "content": "The frame shows solid RED.",
        "frame_count": 8, "chunk_latency_ms": 412.5}
WRAPPED = {"id": "0" * 8 + "-0000-0000-0000-" + "0" * 12, "created": 1764835200,
           "model": "cosmos-reason1",
           "media_info": {"type": "timestamp", "start_timestamp": "2026-12-04T08:00:00Z",
                          "end_timestamp": "2026-12-04T08:00:10Z"},
           "chunk_responses": [
               {"chunk_id": 4, "start_time": "0", "end_time": "5",
                "content": "The frame shows solid RED.", "frame_count": 8,
                "chunk_latency_ms": 412.5},
               {"chunk_id": 5, "start_time": "5", "end_time": "10", "content": "",
                "frame_count": 0}]}
CHAT = {"choices": [{"index": 0, "delta": {"content": "The frame shows solid RED."}}]}


def test_flat_event() -> None:
    [chunk] = chunks_of(FLAT)
    assert chunk == CaptionChunk(content="The frame shows solid RED.", chunk_id=4,
                                 start_time="2026-12-04T08:00:00Z",
                                 end_time="2026-12-04T08:00:05Z", frame_count=8,
                                 chunk_latency_ms=412.5)


def test_wrapped_event_as_the_spec_describes_it() -> None:
    red, empty = chunks_of(WRAPPED)
    assert (red.chunk_id, red.content, red.chunk_latency_ms) == (4, "The frame shows solid RED.",
                                                                 412.5)
    assert (empty.chunk_id, empty.content, empty.frame_count) == (5, "", 0)


def test_the_wrapped_sample_is_what_the_spec_says() -> None:
    """Keeps the sample above honest: its keys are the spec's (no ``choices``)."""
    schemas = json.loads(SPEC.read_text())["components"]["schemas"]
    outer = schemas["VlmCaptionsCompletionResponse"]
    inner = schemas["VlmCaptionResponse"]
    assert set(WRAPPED) <= set(outer["properties"])
    assert "choices" not in outer["properties"]
    assert set(outer["required"]) <= set(WRAPPED)
    for item in WRAPPED["chunk_responses"]:  # type: ignore[attr-defined]
        assert set(item) <= set(inner["properties"])
        assert set(inner["required"]) <= set(item)


def test_chat_shaped_event() -> None:
    assert [c.content for c in chunks_of(CHAT)] == ["The frame shows solid RED."]


@pytest.mark.parametrize("event", [{"error": "decoder crashed"},
                                   {"error": {"code": "InternalError",
                                              "message": "decoder crashed"}},
                                   {**FLAT, "error": "decoder crashed"}])
def test_an_error_inside_a_200_is_kept(event: dict[str, object]) -> None:
    [chunk] = chunks_of(event)
    assert "decoder crashed" in chunk.error


@pytest.mark.parametrize("event", [None, [], "text", {}, {"usage": {"total_tokens": 3}},
                                   {"chunk_responses": "nope"}, {"choices": ["x"]},
                                   {"content": 5, "chunk_id": "4", "frame_count": True}])
def test_malformed_events_never_raise(event: object) -> None:
    for chunk in chunks_of(event):
        assert chunk.content == ""
        assert chunk.chunk_id is None
        assert chunk.frame_count is None


def test_a_wrapped_events_end_timestamp_goes_with_its_chunks_and_gives_the_harness_latency(
        ) -> None:
    event = {"id": "r", "created": 1, "model": "m",
             "media_info": {"type": "timestamp", "start_timestamp": "2026-12-05T10:00:00.000Z",
                            "end_timestamp": "2026-12-05T10:00:01.500Z"},
             "chunk_responses": [{"chunk_id": 3, "content": "red", "chunk_latency_ms": 40.0}]}
    [chunk] = chunks_of(event)
    assert chunk.end_timestamp == "2026-12-05T10:00:01.500Z"
    received = datetime.datetime(2026, 12, 5, 10, 0, 2, 250000, datetime.UTC).timestamp()
    chunk = dataclasses.replace(chunk, received_unix=received)
    assert chunk_latency(chunk, "ntp_timestamp") == 750.0  # source to receipt
    assert chunk_latency(chunk, "processing_latency") == 40.0  # the server's own view
    early = dataclasses.replace(chunk, received_unix=received - 10)
    assert chunk_latency(early, "ntp_timestamp") == 0.0  # a skewed clock is never negative
    usage = {**event, "media_info": {"type": "timestamp"}, "chunk_responses": []}
    assert chunks_of(usage) == []
    offset = {**event, "media_info": {"type": "offset", "start_offset": 0, "end_offset": 2}}
    assert chunk_latency(dataclasses.replace(chunks_of(offset)[0], received_unix=received),
                         "ntp_timestamp") is None  # a file chunk: no source time
    bad = {**event, "media_info": {"type": "timestamp", "end_timestamp": "yesterday"}}
    assert chunk_latency(dataclasses.replace(chunks_of(bad)[0], received_unix=received),
                         "ntp_timestamp") is None


def test_a_stamp_after_its_receipt_is_a_clock_disagreement_never_a_fast_service() -> None:
    stamp = "2026-12-05T10:00:01.500Z"
    stamped = datetime.datetime(2026, 12, 5, 10, 0, 1, 500000, datetime.UTC).timestamp()
    chunks = [CaptionChunk("red", i, frame_count=2, chunk_latency_ms=30.0, end_timestamp=stamp,
                           received_unix=stamped + offset)
              for i, offset in enumerate((0.4, -2.0))]
    report = performance_report([UnitOutcome("a", 0, admitted=True, chunks=chunks)], 1)
    assert (report.latencyNotMeasured or "").startswith(
        "not measured: 1 of 2 answered chunk(s) were stamped after they were received")
    server = performance_report([UnitOutcome("a", 0, admitted=True, chunks=chunks)], 1,
                                "processing_latency")
    assert server.latencyNotMeasured is None
    assert server.chunkLatencyMs.p95 == 30.0
