"""Everything the emulator says on the wire conforms to the published OpenAPI.

Two real emulator processes record every ``/v1/`` exchange (``RTVI_EMU_RECORD``): one serving,
with a bearer token, driven through every operation of the spec with successes and the errors
each documents (400, 401, 409, 422, 503); one still loading. Then every recorded exchange --
request, status, response body, each SSE event -- goes through ``openapi.validate_recorded``.
The sources are unreachable RTSP URLs: conformance needs no frames (a chunk without frames is a
valid chunk), so no RTSP server is involved.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.contract import openapi
from tests.contract.client import client, wait_ready
from tests.emulators.helpers import EmulatorProcess

StartEmulator = Callable[..., EmulatorProcess]
TOKEN = "contract-test-token"
DEAD_URL = "rtsp://127.0.0.1:9/nothing"
MODEL = "emulated-vlm"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def _new() -> str:
    return str(uuid.uuid4())


def _take(lines: Iterator[str], count: int) -> list[str]:
    """The next ``count`` SSE data lines of a live response (the rest stays unread)."""
    taken: list[str] = []
    for line in lines:
        if line.startswith("data:"):
            taken.append(line)
            if len(taken) >= count:
                break
    return taken


def _drive_health_and_metadata(http: httpx.Client) -> None:
    for path in ("/v1/health/ready", "/v1/ready", "/v1/health/live", "/v1/live", "/v1/startup",
                 "/v1/models", "/v1/metrics", "/v1/metadata", "/v1/assets/stats", "/v1/version",
                 "/v1/manifest"):
        assert http.get(path).status_code == 200, path
    assert http.get("/v1/health/ready", params={"detailed": "true"}).status_code == 200
    assert http.get("/v1/health/live", params={"detailed": "maybe"}).status_code == 422


def _drive_streams_and_captions(http: httpx.Client) -> None:
    first, second = _new(), _new()
    place: dict[str, Any] = {"place_name": "dock", "place_type": None, "place_lat": 48.1,
                             "place_lon": -11, "place_alt": None, "place_coordinate_x": 3.5,
                             "place_coordinate_y": 0}
    entries: list[dict[str, Any]] = [
        {"liveStreamUrl": DEAD_URL, "description": "first", "id": first, **place},
        {"liveStreamUrl": DEAD_URL, "description": "second", "id": second,
         "sensor_name": "cam two", "username": "u", "password": "p"}]
    assert http.post("/v1/streams/add", json={"streams": entries}).status_code == 200
    duplicate = http.post("/v1/streams/add", json={"streams": entries[:1]})
    assert duplicate.status_code == 200
    assert duplicate.json()["errors"][0]["status_code"] == 409
    bad_adds: list[dict[str, Any]] = [{"streams": [{**entries[0], "place_lat": "48.1"}]},
                                      {"streams": [{**entries[0], "place_floor": 2}]},
                                      {"streams": [{"liveStreamUrl": DEAD_URL}]},
                                      {"streams": []}]
    for bad_add in bad_adds:
        assert http.post("/v1/streams/add", json=bad_add).status_code == 422, bad_add
    assert http.get("/v1/streams/get-stream-info").status_code == 200

    query: dict[str, Any] = {"id": first, "prompt": "Describe.", "model": MODEL,
                             "chunk_duration": 1,
             "max_tokens": 64, "seed": 7, "enable_audio": False, "media_type": "video",
             "api_type": "internal", "response_format": {"type": "text"}}
    assert http.post("/v1/generate_captions", json=query).status_code == 200
    assert http.post("/v1/generate_captions",
                     json={**query, "id": [first, second]}).status_code == 200
    streaming = {**query, "stream": True, "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/generate_captions", json=streaming) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert _take(lines, 1)
        assert http.delete(f"/v1/generate_captions/{first}").status_code == 200
        assert _take(lines, 3)[-1] == "data: [DONE]"  # the usage event, then [DONE]
    assert http.post("/emulator/knobs", json={"caption_shape": "flat",
                                              "delete_in_use": "refuse"}).status_code == 200
    with http.stream("POST", "/v1/generate_captions", json=streaming) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert len(_take(lines, 2)) == 2
        busy = http.delete(f"/v1/streams/delete/{first}")
        assert busy.status_code == 409
        assert http.delete(f"/v1/generate_captions/{first}",
                           params={"request_id": response.headers["x-request-id"]}
                           ).status_code == 200
        assert _take(lines, 3)[-1] == "data: [DONE]"
    for bad_query in ({**query, "chunk_duration": 0.5}, {**query, "bogus": 1},
                {**query, "id": "-leading-dash"}, {"prompt": "p", "model": MODEL}):
        assert http.post("/v1/generate_captions", json=bad_query).status_code == 422, bad_query
    assert http.post("/v1/generate_captions", json={**query, "id": _new()}).status_code == 400
    assert http.post("/v1/generate_captions", json={**query, "id": []}).status_code == 400
    assert http.post("/emulator/knobs", json={"max_streams": 0}).status_code == 200
    assert http.post("/v1/generate_captions", json=query).status_code == 503
    assert http.post("/emulator/knobs", json={"max_streams": None}).status_code == 200
    assert http.delete(f"/v1/generate_captions/{first}").status_code == 400
    assert http.delete("/v1/generate_captions/not-a-uuid").status_code == 422
    assert http.delete(f"/v1/generate_captions/{first}",
                       params={"request_id": "x"}).status_code == 422

    stuck = {"kind": "stuck_delete", "streams": [first]}
    assert http.post("/emulator/faults", json=stuck).status_code == 200
    assert http.delete(f"/v1/streams/delete/{first}").status_code == 409
    assert http.delete("/emulator/faults").status_code == 200
    assert http.delete(f"/v1/streams/delete/{first}").status_code == 200
    assert http.delete(f"/v1/streams/delete/{first}").status_code == 400
    assert http.delete("/v1/streams/delete/nope").status_code == 422
    batch = http.request("DELETE", "/v1/streams/delete-batch",
                         json={"stream_ids": [second, _new()], "blocking": True,
                               "drain_timeout_seconds": 0})
    assert batch.status_code == 200
    assert batch.json()["deleted"] == [second]
    bad_deletes: list[dict[str, Any]] = [{"stream_ids": []}, {"stream_ids": ["nope"]},
                                         {"stream_ids": [second], "x": 1}]
    for bad_delete in bad_deletes:
        assert http.request("DELETE", "/v1/streams/delete-batch",
                            json=bad_delete).status_code == 422


def _drive_files(http: httpx.Client) -> None:
    form = {"purpose": "vision", "media_type": "image", "sensor_name": "bench",
            "creation_time": "2025-01-01T00:00:00.000Z"}
    uploaded = http.post("/v1/files", data=form, files={"file": ("a frame.png", PNG)})
    assert uploaded.status_code == 200, uploaded.text
    file_id = uploaded.json()["id"]
    chosen = _new()
    assert http.post("/v1/files", data={**form, "id": chosen, "filename": "dir/b.png"},
                     files={"file": ("ignored.png", PNG)}).status_code == 200
    assert http.post("/v1/files", data={**form, "id": chosen},
                     files={"file": ("again.png", PNG)}).status_code == 400
    assert http.post("/v1/files", data=form).status_code == 400  # neither file nor url
    for bad_x in ({**form, "purpose": "fun"}, {"purpose": "vision"},
                {**form, "url": "https://example.invalid/a.mp4"}):
        assert http.post("/v1/files", data=bad_x, files={"file": ("x.png", PNG)}
                         ).status_code == 422, bad_x
    assert http.get("/v1/files", params={"purpose": "vision"}).status_code == 200
    assert http.get("/v1/files").status_code == 422
    assert http.get(f"/v1/files/{file_id}").status_code == 200
    content = http.get(f"/v1/files/{file_id}/content")
    assert content.status_code == 200
    assert content.content == PNG
    assert http.get(f"/v1/files/{_new()}").status_code == 400
    assert http.get(f"/v1/files/{_new()}/content").status_code == 400
    assert http.get("/v1/files/nope").status_code == 422
    assert http.delete(f"/v1/files/{file_id}").status_code == 200
    assert http.delete(f"/v1/files/{file_id}").status_code == 400
    assert http.delete(f"/v1/files/{chosen}").status_code == 200


def _drive_chat_and_completions(http: httpx.Client) -> None:
    chat = {"model": MODEL, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "hello"},
                                     {"type": "image_url", "image_url": {"url": "data:,"}}]}]}
    assert http.post("/v1/chat/completions", json=chat).status_code == 200
    with http.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as response:
        assert response.status_code == 200
        list(response.iter_lines())
    assert http.post("/v1/chat/completions", json={**chat, "id": _new()}).status_code == 400
    for bad_y in ({**chat, "bogus": 1}, {**chat, "n": 2}, {"model": MODEL, "messages": []}):
        assert http.post("/v1/chat/completions", json=bad_y).status_code == 422, bad_y
    text = {"model": MODEL, "prompt": "hello there", "max_tokens": 2}
    assert http.post("/v1/completions", json=text).status_code == 200
    with http.stream("POST", "/v1/completions", json={**text, "stream": True}) as response:
        assert response.status_code == 200
        list(response.iter_lines())
    assert http.post("/v1/completions", json={"model": MODEL}).status_code == 422


def _drive_cameras_and_config(http: httpx.Client) -> None:
    add: dict[str, Any] = {"key": "cam-1", "value": {"camera_id": "cam-1", "camera_name": "Dock 1",
                                     "camera_url": DEAD_URL, "change": "camera_add"}}
    added = http.post("/v1/stream/add", json=add)
    assert added.status_code == 200, added.text
    vios = {"alert_type": "camera_status_change", "created_at": "now", "source": "vst",
            "event": {"camera_id": "cam-2", "camera_url": DEAD_URL, "change": "camera_streaming",
                      "vendor_field": 1}}
    assert http.post("/v1/stream/add", json=vios).status_code == 200
    http_camera = {**add, "value": {**add["value"], "camera_url": "http://127.0.0.1:9/x"}}
    assert http.post("/v1/stream/add", json=http_camera).status_code == 400
    assert http.post("/v1/stream/add", json={"key": "k", "value": {}}).status_code == 422
    assert http.get("/v1/stream/get-stream-info").status_code == 200
    remove = {"key": "cam-1", "value": {"camera_id": "cam-1", "change": "camera_remove"}}
    assert http.post("/v1/stream/remove", json=remove).status_code == 200
    gone = {"key": "x", "value": {"camera_id": "no-such-camera", "change": "remove"}}
    assert http.post("/v1/stream/remove", json=gone).status_code == 400
    assert http.post("/v1/stream/remove", json={"key": "x"}).status_code == 422
    config = {"alert_type": "config", "created_at": "now", "txn_id": "t-1", "source": "ops",
              "event": {"change": "update_config", "metadata": {
                  "messagingbus": "kafka", "topic-prefix": "site1.", "errorbus": "redis"}}}
    assert http.post("/v1/config", json=config).status_code == 200
    bad = {**config, "event": {"change": "x", "metadata": {"messagingbus": "mqtt",
                                                           "topic-prefix": "p"}}}
    assert http.post("/v1/config", json=bad).status_code == 422


def _sample_path(template: str) -> str:
    return template.replace("{file_id}", _new()).replace("{stream_id}", _new())


def test_every_operation_conforms_on_the_wire(
    start_emulator: StartEmulator, tmp_path: Path
) -> None:
    serving_log, loading_log = tmp_path / "serving.jsonl", tmp_path / "loading.jsonl"
    serving = start_emulator(RTVI_EMU_API_TOKEN=TOKEN, RTVI_EMU_RECORD=str(serving_log),
                             RTVI_EMU_LATENCY_MS="0", RTVI_EMU_DRAIN_S="0.2")
    loading = start_emulator(RTVI_EMU_STARTUP_DELAY_S="600", RTVI_EMU_RECORD=str(loading_log))
    wait_ready(serving, TOKEN)
    with client(serving, TOKEN) as http:
        _drive_health_and_metadata(http)
        _drive_streams_and_captions(http)
        _drive_files(http)
        _drive_chat_and_completions(http)
        _drive_cameras_and_config(http)
    with client(serving, None) as anonymous, client(serving, "wrong") as wrong:
        for method, template in openapi.operations():
            assert anonymous.request(method, _sample_path(template)).status_code == 401
        assert wrong.get("/v1/health/ready").status_code == 401
    loading.wait_listening()
    with client(loading, None) as http:
        assert http.get("/v1/health/ready").status_code == 503
        assert http.get("/v1/startup").status_code == 500
        assert http.get("/v1/streams/get-stream-info").status_code == 500
        query = {"id": _new(), "prompt": "p", "model": MODEL}
        assert http.post("/v1/generate_captions", json=query).status_code == 503
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        assert http.post("/v1/chat/completions", json=chat).status_code == 503

    records = openapi.read_records(serving_log) + openapi.read_records(loading_log)
    assert openapi.violations(records) == []
    seen: dict[tuple[str, str], set[int]] = {}
    for record in records:
        op = openapi.operation(record["method"], record["path"])
        assert op is not None
        seen.setdefault((op.method, op.template), set()).add(record["status"])
    for key in openapi.operations():
        assert 200 in seen.get(key, set()), f"{key} never answered 200"
        assert 401 in seen[key], f"{key} never answered 401"
    with_bodies = [(m, t) for m, t in openapi.operations()
                   if "requestBody" in openapi.spec()["paths"][t][m.lower()]]
    for key in with_bodies:
        assert 422 in seen[key], f"{key} never refused a bad body"
    sse = [r for r in records if r.get("events")]
    assert {r["path"] for r in sse} >= {"/v1/generate_captions", "/v1/chat/completions",
                                        "/v1/completions"}
