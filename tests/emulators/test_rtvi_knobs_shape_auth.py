"""Caption result shapes (``RTVI_EMU_CAPTION_SHAPE`` / ``caption_shape``), bearer auth
(``RTVI_EMU_API_TOKEN``) and the exchange record (``RTVI_EMU_RECORD``), against real processes."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.emulators import rtvi_client as rc
from tests.emulators.helpers import EmulatorProcess, wait_for
from tests.emulators.rtsp_source import RtspSource

StartEmulator = Callable[..., EmulatorProcess]
TOKEN = "tok-Canary-7f3a9c"  # must never appear in any output of the emulator


def _ms(stamp: object) -> float:
    moment = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return moment.timestamp() * 1000




def test_flat_and_wrapped_shapes(start_emulator: StartEmulator, rtsp_source: RtspSource) -> None:
    emulator = start_emulator(RTVI_EMU_LATENCY_MS="0")  # wrapped: the default
    emulator.wait_ready()
    stream_id = rc.new_id()
    with rc.client(emulator) as http:
        rc.add(http, rc.entry(rtsp_source.url("red"), stream_id))
        rc.wait_decoding(http, stream_id, frames=1)
        body = rc.caption_body(stream_id, stream=True, chunk_duration=1)
        [wrapped] = rc.first_events(http, body, 1)
        assert set(wrapped) == {"id", "created", "model", "media_info", "chunk_responses"}
        [chunk] = wrapped["chunk_responses"]
        assert chunk["content"] == "The frame shows solid RED."
        # media_info stamps the chunk's first and last frames, inside its window
        info = wrapped["media_info"]
        assert isinstance(info, dict)
        assert info["type"] == "timestamp"
        assert _ms(chunk["start_time"]) - 50 <= _ms(info["start_timestamp"]) <= _ms(
            info["end_timestamp"]) <= _ms(chunk["end_time"]) + 50, (info, chunk)
        whole = http.post("/v1/generate_captions", json={**body, "stream": False}).json()
        assert whole["chunk_responses"][0]["content"] == "The frame shows solid RED."
        assert whole["usage"]["total_chunks_processed"] == 1

        assert http.post("/emulator/knobs", json={"caption_shape": "flat"}).json()[
            "caption_shape"] == "flat"
        [flat] = rc.first_events(http, body, 1)
        assert "chunk_responses" not in flat
        assert "id" not in flat
        assert flat["content"] == "The frame shows solid RED."
        assert flat["chunk_id"] == 0
        single = http.post("/v1/generate_captions", json={**body, "stream": False}).json()
        assert single["content"] == "The frame shows solid RED."
        refused = http.post("/emulator/knobs", json={"caption_shape": "nested"})
        assert refused.status_code == 422


def test_default_shape_is_wrapped_and_bad_shape_exits_2(start_emulator: StartEmulator) -> None:
    emulator = start_emulator()
    emulator.wait_ready()
    assert emulator.get("/emulator/state").json()["knobs"]["caption_shape"] == "wrapped"
    broken = start_emulator(RTVI_EMU_CAPTION_SHAPE="nested")
    assert broken.wait_exit() == 2
    assert "RTVI_EMU_CAPTION_SHAPE" in broken.stderr()


def test_bearer_token_is_required_and_never_shown(
    start_emulator: StartEmulator, tmp_path: Path
) -> None:
    record = tmp_path / "exchanges.jsonl"
    emulator = start_emulator(RTVI_EMU_API_TOKEN=TOKEN, RTVI_EMU_RECORD=str(record))
    emulator.wait_listening()
    base = emulator.base_url
    with httpx.Client(base_url=base, trust_env=False) as anonymous:
        for path in ("/v1/health/ready", "/v1/health/live", "/v1/models", "/v1/no-such-path"):
            refused = anonymous.get(path)
            assert refused.status_code == 401, path
            assert refused.json() == {"code": "Unauthorized",
                                      "message": "Missing or invalid bearer token"}
        assert anonymous.get("/emulator/state").status_code == 200  # admin API stays open
        wrong = anonymous.get("/v1/models", headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401
        basic = anonymous.get("/v1/models", headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
    authorised = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base, trust_env=False, headers=authorised) as http:
        wait_for(lambda: True if http.get("/v1/health/ready").status_code == 200 else None,
                 what="ready with the token")
        assert http.get("/v1/models").status_code == 200
        state = http.get("/emulator/state").text
        exchanges = http.get("/emulator/exchanges").json()
    assert exchanges["recording"] is True
    assert {e["status"] for e in exchanges["exchanges"]} == {200, 401}
    for text in (emulator.stdout(), emulator.stderr(), state, json.dumps(exchanges),
                 record.read_text()):
        assert TOKEN not in text
    assert "401 Unauthorized" in emulator.stdout()  # the refusals are logged, the token is not


def test_record_redacts_credentials(start_emulator: StartEmulator, tmp_path: Path) -> None:
    record = tmp_path / "exchanges.jsonl"
    emulator = start_emulator(RTVI_EMU_RECORD=str(record))
    emulator.wait_ready()
    with rc.client(emulator) as http:
        entry = {**rc.entry("rtsp://viewer:hunter2@127.0.0.1:9/x"), "password": "s3cret",
                 "username": "viewer"}
        assert rc.add(http, entry).status_code == 200
    records = [json.loads(line) for line in record.read_text().splitlines()]
    [exchange] = [r for r in records if r["path"] == "/v1/streams/add"]
    sent = exchange["request_body"]["streams"][0]
    assert sent["password"] == "redacted"
    assert sent["liveStreamUrl"] == "rtsp://redacted@127.0.0.1:9/x"
    assert "hunter2" not in record.read_text()
    assert "s3cret" not in record.read_text()
    assert exchange["status"] == 200
    assert exchange["response_body"]["errors"] == []
