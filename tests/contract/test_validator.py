"""The validator itself: it accepts what the spec allows and names each known drift.

Each refused exchange below is a shape the emulator (or a client) actually produced before
issue 11, so these prove the conformance test can fail for the reasons it exists.
"""

from __future__ import annotations

import pytest

from tests.contract import openapi

STREAM = "9b2a4a8e-7a51-4f8a-8e65-1e0a1a2b3c4d"
REQUEST = "0c2f3b8e-1d4a-4c55-9a77-2b8d7e6f5a41"
CHUNK = {"chunk_id": 0, "start_time": "2025-01-01T00:00:00.000Z",
         "end_time": "2025-01-01T00:00:02.000Z", "content": "The frame shows solid RED.",
         "frame_count": 4}
MEDIA = {"type": "timestamp", "start_timestamp": "2025-01-01T00:00:00.000Z",
         "end_timestamp": "2025-01-01T00:00:02.000Z"}
WRAPPED = {"id": REQUEST, "created": 1, "model": "m", "media_info": MEDIA,
           "chunk_responses": [CHUNK]}
QUERY = {"id": STREAM, "prompt": "Describe.", "model": "m", "stream": True}


def test_conforming_exchanges_pass() -> None:
    openapi.validate_exchange("POST", "/v1/generate_captions", 200, QUERY, events=[CHUNK, "[DONE]"])
    openapi.validate_exchange("POST", "/v1/generate_captions", 200, QUERY,
                              events=[WRAPPED, "[DONE]"])
    openapi.validate_exchange("POST", "/v1/generate_captions", 200, {**QUERY, "stream": False},
                              WRAPPED)
    openapi.validate_exchange("DELETE", f"/v1/streams/delete/{STREAM}", 409, None,
                              {"code": "ResourceInUse", "message": "Resource is in use"})
    openapi.validate_exchange("GET", "/v1/files", 200, None, {"object": "list", "data": []},
                              query={"purpose": ["vision"]})


@pytest.mark.parametrize(
    ("exchange", "needle"),
    [
        # an undocumented status
        (("DELETE", f"/v1/streams/delete/{STREAM}", 404, None,
          {"code": "NotFound", "message": "not found"}), "not documented"),
        (("POST", "/v1/streams/add", 409, {"streams": [{"liveStreamUrl": "rtsp://h/x",
                                                        "description": "d", "id": STREAM}]},
          {"code": "DuplicateStreamId", "message": "exists"}), "not documented"),
        # a caption event that carries choices and stream_id
        (("POST", "/v1/generate_captions", 200, QUERY, None),
         "Additional properties"),
        # a ServiceError message with digits and a colon
        (("GET", f"/v1/files/{STREAM}", 400, None,
          {"code": "InvalidParameter", "message": f"file {STREAM}: not found"}), "does not match"),
        # 422 to a request that the spec allows (a non-UUID stream id, an optional field)
        (("POST", "/v1/generate_captions", 422, {**QUERY, "id": "camera-7", "enable_audio": False},
          {"code": "ValidationError", "message": "bad"}), "conforms"),
        # 200 to a request the spec refuses (place_lat as a string)
        (("POST", "/v1/streams/add", 200,
          {"streams": [{"liveStreamUrl": "rtsp://h/x", "description": "d", "place_lat": "1"}]},
          {"results": [{"id": STREAM}], "errors": []}), "non-conforming request"),
        # GET /v1/files without ?purpose=
        (("GET", "/v1/files", 200, None, {"object": "list", "data": []}), "purpose: missing"),
        # a path that is not an operation
        (("GET", "/v1/streams", 200, None, []), "no such operation"),
    ],
)
def test_known_drifts_are_violations(exchange: tuple[object, ...], needle: str) -> None:
    method, path, status, request, response = exchange
    events: list[object] | None = None
    if response is None:  # the old caption event shape
        events = [{**CHUNK, "stream_id": STREAM, "choices": [{"index": 0}]}, "[DONE]"]
    with pytest.raises(openapi.ContractViolation, match=needle):
        openapi.validate_exchange(str(method), str(path), int(str(status)), request, response,
                                  events=events)


def test_done_must_come_last_and_events_must_be_objects() -> None:
    with pytest.raises(openapi.ContractViolation, match="before the last"):
        openapi.validate_exchange("POST", "/v1/generate_captions", 200, QUERY,
                                  events=["[DONE]", CHUNK])
    with pytest.raises(openapi.ContractViolation, match="not a JSON object"):
        openapi.validate_exchange("POST", "/v1/generate_captions", 200, QUERY,
                                  events=["garbage"])
