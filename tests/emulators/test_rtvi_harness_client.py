"""The emulator as the VSS perf harness (the service team's own client) expects it, against a
real process and real decoding: a stream deleted while captioned ends its caption stream with
``[DONE]``; a stopped request ends within a second even when behind schedule; latency measured
from ``media_info.end_timestamp`` includes a delay injected between the source and the service;
``/v1/metrics`` carries the series the harness reads.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from tests.emulators import rtvi_client as rc
from tests.emulators.helpers import EmulatorProcess
from tests.emulators.rtsp_source import RtspSource

StartEmulator = Callable[..., EmulatorProcess]


def _unix(stamp: object) -> float:
    """The harness's reading of a timestamp: ``%Y-%m-%dT%H:%M:%S.%fZ``, UTC."""
    parsed = datetime.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def _one_stream(start_emulator: StartEmulator, rtsp_source: RtspSource,
                **knobs: str) -> tuple[EmulatorProcess, str]:
    emulator = start_emulator(**knobs)
    emulator.wait_ready()
    stream_id = rc.new_id()
    with rc.client(emulator) as http:
        assert rc.add(http, rc.entry(rtsp_source.url("red"), stream_id)).status_code == 200
        rc.wait_decoding(http, stream_id, frames=1)
    return emulator, stream_id


def _body(stream_id: str, chunk_s: int = 1) -> dict[str, Any]:
    return rc.caption_body([stream_id], stream=True, chunk_duration=chunk_s,
                           stream_options={"include_usage": True})


@contextlib.contextmanager
def _captioning(emulator: EmulatorProcess, stream_id: str) -> Iterator[
        tuple[Iterator[dict[str, Any] | str], httpx.Client]]:
    """One streamed caption request on ``stream_id``, its first event read; yields the rest
    of its events and a second client to act with while the request is open."""
    with rc.client(emulator) as http, http.stream(
            "POST", "/v1/generate_captions", json=_body(stream_id)) as response:
        assert response.status_code == 200
        events = rc.sse_events(response)
        first = next(events)
        assert isinstance(first, dict), first
        assert first["chunk_responses"], first
        with rc.client(emulator) as other:
            yield events, other


def test_a_stream_deleted_while_captioned_ends_its_caption_stream_and_is_gone(
        start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator, stream_id = _one_stream(start_emulator, rtsp_source, RTVI_EMU_LATENCY_MS="0")
    with _captioning(emulator, stream_id) as (events, other):
        deleted = other.delete(f"/v1/streams/delete/{stream_id}")  # captions still open,
        assert deleted.status_code == 200, deleted.text  # as single_live_stream does it
        assert stream_id not in rc.listed_ids(other)
        tail = list(events)
    assert tail[-1] == "[DONE]", tail
    usage = [e for e in tail if isinstance(e, dict) and "usage" in e]
    assert len(usage) == 1
    assert usage[0]["chunk_responses"] == []
    info = usage[0]["media_info"]  # never a timestamp one: the harness reads end_timestamp
    assert isinstance(info, dict), info
    assert info["type"] == "offset", info  # from every such one
    with rc.client(emulator) as http:
        assert http.get("/emulator/state").json()["caption_requests"] == []


def test_a_batch_delete_of_captioned_streams_ends_their_requests(
        start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator, stream_id = _one_stream(start_emulator, rtsp_source, RTVI_EMU_LATENCY_MS="0")
    with _captioning(emulator, stream_id) as (events, other):
        batch = other.request("DELETE", "/v1/streams/delete-batch",
                              json={"stream_ids": [stream_id], "blocking": True})
        assert batch.json() == {"deleted": [stream_id], "errors": []}, batch.text
        assert list(events)[-1] == "[DONE]"


def test_a_stopped_request_behind_schedule_ends_within_a_second(
        start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    # Each chunk takes 3 s of model time on a 1 s chunk: the request falls behind at once.
    emulator, stream_id = _one_stream(start_emulator, rtsp_source, RTVI_EMU_LATENCY_MS="3000")
    with _captioning(emulator, stream_id) as (events, other):  # the next chunk is late
        stopped_at = time.monotonic()
        assert other.delete(f"/v1/generate_captions/{stream_id}").status_code == 200
        tail = list(events)
        ended_in = time.monotonic() - stopped_at
    assert tail[-1] == "[DONE]"
    assert all("usage" in e for e in tail[:-1] if isinstance(e, dict)), tail  # no late chunk
    assert ended_in < 1.0, f"the caption stream ended {ended_in:.2f}s after the stop"


def test_latency_from_end_timestamp_includes_a_delay_between_source_and_service(
        start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    delay = 2.0
    emulator, stream_id = _one_stream(start_emulator, rtsp_source, RTVI_EMU_LATENCY_MS="0",
                                      RTVI_EMU_INGEST_DELAY_S=str(delay))
    samples: list[tuple[float, float]] = []  # (receive - end_timestamp, chunk_latency_ms)
    with rc.client(emulator) as http, http.stream(
            "POST", "/v1/generate_captions", json=_body(stream_id)) as response:
        for event in rc.sse_events(response):
            assert isinstance(event, dict)
            received = time.time()
            [chunk] = event["chunk_responses"]
            if chunk["frame_count"]:
                info = event["media_info"]
                assert isinstance(info, dict)
                assert info["type"] == "timestamp"
                samples.append((received - _unix(info["end_timestamp"]),
                                float(chunk["chunk_latency_ms"])))
            if len(samples) >= 3:
                break
    for measured, server_ms in samples:
        assert measured >= delay, samples  # transport and queueing are in the measure
        assert server_ms < delay * 1000, samples  # the server's own view leaves them out


def test_metrics_carry_the_series_the_harness_reads_with_measured_values(
        start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator, stream_id = _one_stream(start_emulator, rtsp_source, RTVI_EMU_LATENCY_MS="50")
    with rc.client(emulator) as http:
        before = _harness_metrics(http)
        rc.first_events(http, _body(stream_id), 3)
        after = _harness_metrics(http)
    assert after["decode_latency_seconds_count"] >= before.get(
        "decode_latency_seconds_count", 0) + 3
    assert after["decode_latency_seconds_sum"] > 0
    assert after["vlm_latency_seconds_latest_seconds"] >= 0.045
    assert after["vlm_pipeline_latency_seconds_latest_seconds"] >= after[
        "vlm_latency_seconds_latest_seconds"]
    assert after["e2e_latency_seconds_latest_seconds"] > 0
    assert "decode_latency_seconds_latest_seconds" in after


def _harness_metrics(http: httpx.Client) -> dict[str, float]:
    """``/v1/metrics`` parsed as the harness parses it: lines split on one space into a name and
    a value, names ending in ``_latest``, ``_sum``, ``_count`` or ``_seconds`` kept."""
    found: dict[str, float] = {}
    for line in http.get("/v1/metrics").text.split("\n"):
        if not line or line.startswith("#"):
            continue
        parts = line.split(" ")
        if len(parts) == 2 and parts[0].endswith(("_latest", "_sum", "_count", "_seconds")):
            found[parts[0]] = float(parts[1])
    return found

