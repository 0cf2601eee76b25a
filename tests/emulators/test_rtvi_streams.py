"""Live streams, captions, capacity, drain and faults of the RTVI emulator, with real decoding.

Sources are the session's GStreamer RTSP server on loopback (``rtsp_source``); the emulator runs
as a real process and decodes them with ffmpeg. Waits are polls of the emulator's own state
(decoded frame counts, listings), never fixed sleeps.
"""

from __future__ import annotations

import datetime
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators import rtvi_client as rc
from tests.emulators.helpers import EmulatorProcess, wait_for
from tests.emulators.rtsp_source import RtspSource
from tests.ports import free_port

StartEmulator = Callable[..., EmulatorProcess]
NO_FRAME = "No new frame was decoded from the stream during this chunk."


def _ready(start_emulator: StartEmulator, **knobs: str) -> EmulatorProcess:
    emulator = start_emulator(**knobs)
    emulator.wait_ready()
    return emulator


def test_two_streams_caption_their_own_colours_over_sse(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = _ready(start_emulator, RTVI_EMU_LATENCY_MS="40", RTVI_EMU_CAPTION_SHAPE="flat",
                      RTVI_EMU_DELETE_IN_USE="refuse")
    red, framed = rc.new_id(), rc.new_id()
    with rc.client(emulator) as http:
        added = rc.add(
            http,
            rc.entry(rtsp_source.url("red"), red),
            rc.entry(rtsp_source.url("blue-yellow"), framed),
        )
        assert added.status_code == 200, added.text
        assert sorted(r["id"] for r in added.json()["results"]) == sorted([red, framed])
        assert added.json()["errors"] == []
        rc.wait_decoding(http, red, framed)
        body = rc.caption_body(
            [red, framed],
            stream=True,
            chunk_duration=1,
            stream_options={"include_usage": True},
        )
        seen: dict[str, dict[str, Any]] = {}
        order = [red, framed]  # a result names no stream: each chunk answers them in this order
        with http.stream("POST", "/v1/generate_captions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            request_id = response.headers["x-request-id"]
            events = rc.sse_events(response)
            for index, event in enumerate(events):
                assert isinstance(event, dict)
                assert "chunk_responses" not in event
                assert "choices" not in event
                assert event["chunk_id"] == index // 2
                if event["frame_count"]:
                    seen.setdefault(order[index % 2], event)
                if len(seen) == 2:
                    break
            # Active request, and the delete_in_use knob says refuse: 409.
            busy = http.delete(f"/v1/streams/delete/{red}")
            assert busy.status_code == 409
            assert busy.json()["code"] == "ResourceInUse"
            stats = http.get("/v1/assets/stats").json()
            assert stats["caption_requests"]["active"] == 1
            stopped = http.delete(f"/v1/generate_captions/{red}")
            assert stopped.status_code == 200
            assert stopped.json()["request_id"] == request_id
            tail = list(events)
        assert tail[-1] == "[DONE]"
        usage = [e for e in tail if isinstance(e, dict) and "usage" in e]
        assert usage
        assert usage[-1]["usage"]["total_tokens"] > 0
        assert seen[red]["content"] == "The frame shows solid RED."
        assert seen[framed]["content"] == "The frame shows BLUE with a YELLOW border."
        for event in seen.values():
            assert event["vlm_latency_ms"] >= 39
            assert event["chunk_latency_ms"] >= event["vlm_latency_ms"]
            assert event["decode_latency_ms"] >= 0
            window = [
                datetime.datetime.fromisoformat(str(event[key]).replace("Z", "+00:00"))
                for key in ("start_time", "end_time")
            ]
            assert (window[1] - window[0]).total_seconds() == pytest.approx(1.0)
            assert event["input_tokens"] > event["frame_count"]
            assert event["output_tokens"] == len(str(event["content"]).split())
        # The connection is gone: the request is no longer active and the stream deletes.
        wait_for(
            lambda: True if not http.get("/emulator/state").json()["caption_requests"] else None,
            what="the caption request to end",
        )
        assert http.delete(f"/v1/streams/delete/{red}").status_code == 200


def test_a_silent_source_is_reported_never_invented(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = _ready(start_emulator, RTVI_EMU_LATENCY_MS="0", RTVI_EMU_LATENCY_PER_STREAM_MS="100")
    silent, other = rc.new_id(), rc.new_id()
    with rc.client(emulator) as http:
        url = rtsp_source.url("no-such-mount")
        assert rc.add(http, rc.entry(url, silent), rc.entry(url, other)).status_code == 200
        answer = http.post(
            "/v1/generate_captions", json=rc.caption_body(silent, chunk_duration=1)
        )
        assert answer.status_code == 200, answer.text
        chunk = rc.chunk_of(answer.json())
        assert chunk["frame_count"] == 0
        assert chunk["content"] == NO_FRAME
        assert chunk["vlm_latency_ms"] >= 2 * 100 * 0.99  # grows with the two live streams
        metrics = http.get("/v1/metrics").text
        assert "rtvi_emulator_empty_chunks_total 1" in metrics
        assert "rtvi_emulator_active_streams 2" in metrics


def test_duplicates_partial_success_and_validation(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = _ready(start_emulator)
    first, second = rc.new_id(), rc.new_id()
    url = rtsp_source.url("green")
    with rc.client(emulator) as http:
        assert rc.add(http, rc.entry(url, first)).json() == {
            "results": [{"id": first}],
            "errors": [],
        }
        partial = rc.add(http, rc.entry(url, first), rc.entry(url, second), rc.entry(url))
        assert partial.status_code == 200
        results = [r["id"] for r in partial.json()["results"]]
        assert results[0] == second
        assert len(results) == 2
        [error] = partial.json()["errors"]
        assert (error["id"], error["error_code"], error["status_code"]) == (
            first,
            "DuplicateStreamId",
            409,
        )
        only_dup = rc.add(http, rc.entry(url, second))
        assert only_dup.status_code == 200  # the spec documents no 409: errors carry it
        assert only_dup.json()["results"] == []
        assert only_dup.json()["errors"][0]["error_code"] == "DuplicateStreamId"
        assert rc.listed_ids(http) == {first, *results}
        info = {i["id"]: i for i in http.get("/v1/streams/get-stream-info").json()}[first]
        assert info["liveStreamUrl"] == url
        assert info["description"] == "test stream"
        assert {"chunk_duration", "chunk_overlap_duration"} <= set(info)
        bad_bodies = [
            {"streams": []},
            {"streams": [rc.entry("http://x/y")]},
            {"streams": [rc.entry(url, description="semi;colon")]},
            {"streams": [{**rc.entry(url), "colour": "red"}]},
            {"streams": [rc.entry(url, "not-a-uuid")]},
            {"streams": [rc.entry(url)] * 257},
            {"streams": [rc.entry(url)], "extra": 1},
        ]
        for body in bad_bodies:
            refused = http.post("/v1/streams/add", json=body)
            assert refused.status_code == 422, body
            assert set(refused.json()) == {"code", "message"}
        assert http.delete(f"/v1/streams/delete/{rc.new_id()}").status_code == 400


def test_capacity_refuses_then_admits_after_knob_change(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = _ready(start_emulator, RTVI_EMU_MAX_STREAMS="1")
    url = rtsp_source.url("red")
    with rc.client(emulator) as http:
        one, two, three = rc.new_id(), rc.new_id(), rc.new_id()
        mixed = rc.add(http, rc.entry(url, one), rc.entry(url, two))
        assert mixed.status_code == 200
        assert mixed.json()["results"] == [{"id": one}]
        assert [(e["id"], e["error_code"], e["status_code"]) for e in mixed.json()["errors"]] == [
            (two, "ServerBusy", 503)
        ]
        full = rc.add(http, rc.entry(url, three))  # every entry refused: HTTP 503, as the
        assert full.status_code == 503, full.text  # harness counts a resource-bound refusal
        assert full.json()["code"] == "ServerBusy"
        assert http.post("/emulator/knobs", json={"capacity_refusal": "in-200"}).status_code == 200
        full = rc.add(http, rc.entry(url, three))
        assert full.status_code == 200  # the knob's shape: the refusal inside a 200
        assert [(e["error_code"], e["status_code"]) for e in full.json()["errors"]] == [
            ("ServerBusy", 503)
        ]
        knobs = http.post("/emulator/knobs", json={"max_streams": 0})
        assert knobs.json()["max_streams"] == 0
        busy = http.post("/v1/generate_captions", json=rc.caption_body(one))
        assert busy.status_code == 503
        assert busy.json()["code"] == "ServerBusy"
        assert http.post("/emulator/knobs", json={"max_streams": 3}).status_code == 200
        admitted = rc.add(http, rc.entry(url, two), rc.entry(url, three))
        assert admitted.status_code == 200
        assert admitted.json() == {"results": [{"id": two}, {"id": three}], "errors": []}
        assert rc.listed_ids(http) == {one, two, three}
        assert http.post("/emulator/knobs", json={"bogus": 1}).status_code == 422


def test_batch_delete_drains_in_one_window_and_singles_cost_one_each(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    drain = 1.0
    emulator = _ready(start_emulator, RTVI_EMU_DRAIN_S=str(drain))
    url = rtsp_source.url("no-such-mount")  # decoding is irrelevant here; no bandwidth used
    with rc.client(emulator) as http:
        ids = [rc.new_id() for _ in range(6)]
        assert len(rc.add(http, *(rc.entry(url, i) for i in ids)).json()["results"]) == 6
        singles, batch, nonblocking = ids[:2], ids[2:5], ids[5:]

        started = time.monotonic()
        for stream_id in singles:
            assert http.delete(f"/v1/streams/delete/{stream_id}").status_code == 200
        singles_took = time.monotonic() - started
        assert singles_took >= 2 * drain * 0.95  # each single costs a whole window
        assert not rc.listed_ids(http) & set(singles)

        unknown = rc.new_id()
        started = time.monotonic()
        answer = http.request(
            "DELETE",
            "/v1/streams/delete-batch",
            json={"stream_ids": [*batch, unknown], "blocking": True},
        )
        batch_took = time.monotonic() - started
        assert answer.status_code == 200
        assert answer.json()["deleted"] == batch
        codes = {(e["stream_id"], e["status_code"]) for e in answer.json()["errors"]}
        assert codes == {(unknown, 400)}  # "no such live-stream": 400, as the real service
        assert batch_took >= drain * 0.95
        assert batch_took < len(batch) * drain  # three streams, well under three windows
        assert not rc.listed_ids(http) & set(batch)

        answer = http.request(
            "DELETE",
            "/v1/streams/delete-batch",
            json={"stream_ids": nonblocking, "drain_timeout_seconds": 600},
        )
        assert answer.json() == {"deleted": nonblocking, "errors": []}
        assert rc.listed_ids(http) == {nonblocking[0]}  # listed until drained
        still = {i["id"]: i["status"] for i in http.get("/emulator/state").json()["streams"]}
        assert still == {nonblocking[0]: "draining"}
        wait_for(lambda: True if not rc.listed_ids(http) else None, what="the drain to finish")
        for ids in ([], ["nope"]):
            bad = http.request("DELETE", "/v1/streams/delete-batch", json={"stream_ids": ids})
            assert bad.status_code == 422, ids


def test_drain_timeout_caps_the_window(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = _ready(start_emulator, RTVI_EMU_DRAIN_S="600")
    with rc.client(emulator) as http:
        stream_id = rc.new_id()
        rc.add(http, rc.entry(rtsp_source.url("red"), stream_id))
        answer = http.request(
            "DELETE",
            "/v1/streams/delete-batch",
            json={"stream_ids": [stream_id], "blocking": True, "drain_timeout_seconds": 0},
        )
        assert answer.json()["deleted"] == [stream_id]
        assert rc.listed_ids(http) == set()


def test_subscribers_settings_conflict_and_stop_by_request_id(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    emulator = _ready(start_emulator, RTVI_EMU_DELETE_IN_USE="refuse")
    stream_id = rc.new_id()
    with rc.client(emulator) as http:
        rc.add(http, rc.entry(rtsp_source.url("green"), stream_id))
        body = rc.caption_body(stream_id, stream=True, chunk_duration=5)
        with (
            http.stream("POST", "/v1/generate_captions", json=body) as first,
            http.stream("POST", "/v1/generate_captions", json=body) as second,
        ):
            assert first.status_code == second.status_code == 200
            other = http.post(
                "/v1/generate_captions", json=rc.caption_body(stream_id, chunk_duration=3)
            )
            assert other.status_code == 400
            ambiguous = http.delete(f"/v1/generate_captions/{stream_id}")
            assert ambiguous.status_code == 400  # the spec documents no 409 here
            request_id = first.headers["x-request-id"]
            stopped = http.delete(
                f"/v1/generate_captions/{stream_id}", params={"request_id": request_id}
            )
            assert stopped.status_code == 200
            assert list(rc.sse_events(first)) == ["[DONE]"]
            batch = http.request(
                "DELETE", "/v1/streams/delete-batch", json={"stream_ids": [stream_id]}
            )
            assert batch.json()["errors"][0]["error_code"] == "ResourceInUse"
        # Both connections closed by the client: nothing holds the stream any more.
        wait_for(
            lambda: True if not http.get("/emulator/state").json()["caption_requests"] else None,
            what="client disconnect to end the request",
        )
        strict = http.post("/v1/generate_captions", json={**rc.caption_body(stream_id), "x": 1})
        assert strict.status_code == 422
        missing = http.post("/v1/generate_captions", json=rc.caption_body(rc.new_id()))
        assert missing.status_code == 400


def test_restart_forgets_streams_and_leaves_no_decoder(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    first = _ready(start_emulator)
    stream_id = rc.new_id()
    with rc.client(first) as http:
        rc.add(http, rc.entry(rtsp_source.url("red"), stream_id))
        rc.wait_decoding(http, stream_id, frames=1)
    decoders = {p for p in rc.child_pids(first.process.pid) if "ffmpeg" in rc.cmdline(p)}
    assert decoders
    first.signal(signal.SIGTERM)
    assert first.wait_exit() == 0
    assert not any(rc.alive(p) for p in decoders)
    second = _ready(start_emulator)
    with rc.client(second) as http:
        assert http.get("/v1/streams/get-stream-info").json() == []


def test_crash_and_injected_faults(start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator = _ready(start_emulator)
    with rc.client(emulator) as http:
        stream_id = rc.new_id()
        rc.add(http, rc.entry(rtsp_source.url("green"), stream_id))
        fault = {"path_prefix": "/v1/streams/", "status": 503, "count": 2}
        assert http.post("/emulator/faults", json=fault).status_code == 200
        statuses = [http.get("/v1/streams/get-stream-info").status_code for _ in range(3)]
        assert statuses == [503, 503, 200]
        slow = {"path_prefix": "/v1/metadata", "delay_s": 0.3}
        assert http.post("/emulator/faults", json=slow).status_code == 200
        started = time.monotonic()
        assert http.get("/v1/metadata").status_code == 200
        assert time.monotonic() - started >= 0.3
        assert "rtvi_emulator_injected_faults_total 2" in http.get("/v1/metrics").text
        rc.wait_decoding(http, stream_id, frames=1)
        decoders = {p for p in rc.child_pids(emulator.process.pid) if "ffmpeg" in rc.cmdline(p)}
        assert http.post("/emulator/crash", json={"exit_code": 7}).status_code == 200
    assert emulator.wait_exit() == 7
    wait_for(
        lambda: True if not any(rc.alive(p) for p in decoders) else None,
        what="decoders to die with the emulator",
    )


def test_fail_rate_knob(start_emulator: StartEmulator) -> None:
    emulator = _ready(start_emulator, RTVI_EMU_FAIL_RATE="1")
    with rc.client(emulator) as http:
        assert http.get("/v1/streams/get-stream-info").status_code == 500
        assert http.get("/v1/health/ready").status_code == 200
        assert http.get("/emulator/state").status_code == 200


def test_stream_endpoints_refuse_while_loading(start_emulator: StartEmulator) -> None:
    emulator = start_emulator(RTVI_EMU_STARTUP_DELAY_S="30")
    emulator.wait_listening()
    with rc.client(emulator) as http:
        # 500 where the spec documents no 503; generate_captions documents it.
        assert http.get("/v1/streams/get-stream-info").status_code == 500
        assert (
            http.post("/v1/generate_captions", json=rc.caption_body(rc.new_id())).status_code == 503
        )
        assert http.get("/emulator/state").json()["phase"] == "loading"


def _decoders(emulator: EmulatorProcess) -> set[int]:
    return {p for p in rc.child_pids(emulator.process.pid) if "ffmpeg" in rc.cmdline(p)}


def test_no_decode_knob_registers_without_opening_the_source(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    """The same live source added to a default emulator and to one with RTVI_EMU_NO_DECODE=1:
    both list it; only the default one decodes it (frames, an ffmpeg child). The knob keeps
    capacity, duplicates and deletes as they are."""
    url = rtsp_source.url("red")
    decoding = _ready(start_emulator)
    lazy = _ready(start_emulator, RTVI_EMU_NO_DECODE="1", RTVI_EMU_MAX_STREAMS="2",
                  RTVI_EMU_DRAIN_S="0")
    ids = [rc.new_id() for _ in range(3)]
    with rc.client(decoding) as http, rc.client(lazy) as quiet:
        assert rc.add(http, rc.entry(url, ids[0])).status_code == 200
        added = rc.add(quiet, *(rc.entry(url, i) for i in ids))
        assert added.status_code == 200, added.text
        assert added.json()["results"] == [{"id": ids[0]}, {"id": ids[1]}]
        assert [(e["id"], e["error_code"]) for e in added.json()["errors"]] == [
            (ids[2], "ServerBusy")  # capacity still counts registered streams
        ]
        again = rc.add(quiet, rc.entry(url, ids[0]))
        assert again.json()["errors"][0]["error_code"] == "DuplicateStreamId"
        rc.wait_decoding(http, ids[0])  # the source is live: a decoder does get frames
        assert _decoders(decoding)
        state = {s["id"]: s for s in quiet.get("/emulator/state").json()["streams"]}
        assert set(state) == set(ids[:2]) == rc.listed_ids(quiet)
        for stream in state.values():
            assert (stream["decoder_running"], stream["frame_count"]) == (False, 0)
            assert stream["status"] == "active"
            assert stream["liveStreamUrl"] == url
        assert not _decoders(lazy)
        gone = quiet.request(
            "DELETE", "/v1/streams/delete-batch", json={"stream_ids": ids[:2], "blocking": True}
        )
        assert gone.json() == {"deleted": ids[:2], "errors": []}
        assert rc.listed_ids(quiet) == set()
        assert rc.add(quiet, rc.entry(url, ids[2])).status_code == 200  # capacity freed


def test_decode_delay_knob_starts_each_decoder_late_and_never_for_a_deleted_stream(
    start_emulator: StartEmulator, rtsp_source: RtspSource
) -> None:
    """RTVI_EMU_DECODE_DELAY_S: a slow source set-up. A stream is listed at once and decodes
    only after the delay; one deleted before its delay ran out never gets a decoder."""
    emulator = _ready(start_emulator, RTVI_EMU_DECODE_DELAY_S="6", RTVI_EMU_DRAIN_S="0")
    gone, kept = rc.new_id(), rc.new_id()
    with rc.client(emulator) as http:
        assert rc.add(http, rc.entry(rtsp_source.url("red"), gone)).status_code == 200
        deleted = http.request("DELETE", "/v1/streams/delete-batch",
                               json={"stream_ids": [gone], "blocking": True})
        assert deleted.json() == {"deleted": [gone], "errors": []}
        assert rc.add(http, rc.entry(rtsp_source.url("red"), kept)).status_code == 200
        assert _stream_state(http, kept)["decoder_running"] is False  # 6 s to go
        assert rc.listed_ids(http) == {kept}
        rc.wait_decoding(http, kept)  # its timer ran after the deleted stream's
        assert len(_decoders(emulator)) == 1


def test_a_source_that_stalls_is_decoded_again_when_it_resumes(
    start_emulator: StartEmulator, tmp_path: Path
) -> None:
    """A publisher frozen mid-session (SIGSTOP: the socket stays open, nothing comes) must not
    leave the stream decoding nothing for ever: the decoder gives up, retries, and frames flow
    again once the source resumes."""
    source = RtspSource(free_port(), {"red": ("FF0000", None)}, tmp_path / "rtsp.log")
    source.start()
    try:
        emulator = _ready(start_emulator)
        stream_id = rc.new_id()
        with rc.client(emulator) as http:
            rc.add(http, rc.entry(source.url("red"), stream_id))
            rc.wait_decoding(http, stream_id, frames=2)
            assert source.process is not None
            source.process.send_signal(signal.SIGSTOP)
            try:
                before = _frames(http, stream_id)
                wait_for(lambda: True if _restarts(http, stream_id) >= 1 else None,
                         timeout=30.0, what="the stalled decoder to give up and retry")
            finally:
                source.process.send_signal(signal.SIGCONT)
            wait_for(lambda: True if _frames(http, stream_id) > before + 2 else None,
                     timeout=30.0, what="frames again after the source resumed")
    finally:
        source.stop()


def _stream_state(http: httpx.Client, stream_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        s for s in http.get("/emulator/state").json()["streams"] if s["id"] == stream_id)
    return found


def _frames(http: httpx.Client, stream_id: str) -> int:
    return int(str(_stream_state(http, stream_id)["frame_count"]))


def _restarts(http: httpx.Client, stream_id: str) -> int:
    return int(str(_stream_state(http, stream_id)["decoder_restarts"]))
