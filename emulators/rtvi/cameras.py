"""Camera-style stream management: ``/v1/stream/add``, ``/v1/stream/remove`` and
``/v1/stream/get-stream-info`` (the VIOS/VST event shapes), plus ``POST /v1/config``.

The three stream operations act on the same stream table as ``/v1/streams/*``: a camera added
here is a live stream (listed by both listings, decoded, captionable by its ``asset_id``).
Bodies are the spec's ``StreamAddRequest`` | ``ViosStreamAddRequest`` and
``StreamRemoveRequest`` | ``ViosStreamRemoveRequest`` (the VIOS variants allow extra keys, the
others are strict); answers ``StreamAddResponse``, ``StreamRemoveResponse`` and
``StreamInfoResponse``.

Choices where the real service is not published:

- ``camera_url`` must be ``rtsp://`` (``camera_type`` ``rtsp`` or absent): this emulator decodes
  live RTSP only, and ``LiveStreamInfo`` can list only ``rtsp://`` URLs. Others: 400.
- The stream's ID (``asset_id``) is new per camera; adding a ``camera_id`` that is registered
  already answers its existing ``asset_id`` (idempotent), ``status`` ``added``. ``inference`` is
  false: adding a camera does not start captioning.
- The description listed by ``/v1/streams/get-stream-info`` is the camera name reduced to the
  characters ``LiveStreamInfo.description`` allows.
- Remove starts the drain (like a non-blocking batch delete) and answers ``removed``; an unknown
  camera is 400, a camera in use (captioned, or under the ``stuck_delete`` fault) 409.
- ``stream_list`` lists every stream; for one added through ``/v1/streams/add``, ``camera_id``
  is its ``sensor_name`` or, failing that, its ID. ``source_id`` is the position in the list.
- ``POST /v1/config`` (``ConfigRequest`` -> ``ConfigResponse``) records the message-bus settings
  (shown by ``/emulator/state``) and answers ``status`` ``applied``; ``topic`` is
  ``<topic-prefix>rtvi-vlm-captions`` and ``error_topic`` ``<error-topic-prefix>rtvi-vlm-errors``
  when an error bus is set. Nothing is published anywhere.
- While the model loads: 500 ``ServiceUnavailable``.
"""

from __future__ import annotations

import re
import threading

from emulators.rtvi import schema, validation
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.schema import (
    FREE_OBJECT,
    IDENTIFIER,
    Boolean,
    Enum,
    Integer,
    Number,
    Object,
    Schema,
    Text,
    nullable,
    text,
)
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import NewStream, StreamTable, loading_response, places_of
from emulators.rtvi.validation import Invalid

CHANGE = Text(32, r"^[A-Za-z_]+$")
CAMERA_TYPE = nullable(Text(32, r"^(rtsp|file)$"))
HEADERS = nullable(
    Object(
        {
            "source": nullable(text(256)),
            "created_at": nullable(text(64)),
            "url_headers": nullable(Object({}, extra_values=Text(8192, r"^[^\r\n]*$"))),
        }
    )
)
OPTIONAL_TEXT_1024 = nullable(text(1024))
STREAM_METADATA = Object(
    {
        "resolution": nullable(Text(32, r"^[0-9]+x[0-9]+$")),
        "codec": nullable(Text(64, r"^[A-Za-z0-9._\-]+$")),
        "framerate": nullable(Number(0.1, 240)),
        "prompt": nullable(text(1_048_576)),
        "system_prompt": nullable(text(1_048_576)),
        "model": nullable(text(256)),
        "max_tokens": nullable(Integer(1, 16384)),
        "min_tokens": nullable(Integer(1, 16384)),
        "temperature": nullable(Number(0, 1)),
        "top_p": nullable(Number(0, 1)),
        "top_k": nullable(Number(1, 1000)),
        "ignore_eos": nullable(Boolean()),
        "seed": nullable(Integer(1, 4294967295)),
        "chunk_duration": nullable(Integer(0, 3600)),
        "chunk_overlap_duration": nullable(Integer(-3600, 3600)),
        "num_frames_per_second_or_fixed_frames_chunk": nullable(Number(0, 256)),
        "use_fps_for_chunking": nullable(Boolean()),
        "vlm_input_width": nullable(Integer(0, 4096)),
        "vlm_input_height": nullable(Integer(0, 4096)),
        "enable_reasoning": nullable(Boolean()),
        "enable_audio": nullable(Boolean()),
        "alert_category": nullable(text(500)),
        "mm_processor_kwargs": nullable(FREE_OBJECT),
        "response_format_type": nullable(Text(32, r"^(text|json_object)$")),
        "stream": nullable(Boolean()),
    }
)
STREAM_ADD = Object(
    {
        "key": text(256),
        "value": Object(
            {
                "camera_id": IDENTIFIER,
                "camera_name": nullable(text(256)),
                "camera_url": Text(1024, r"^(rtsp://|file://|https?://)"),
                "camera_type": CAMERA_TYPE,
                "camera_vod_url": OPTIONAL_TEXT_1024,
                "tags": OPTIONAL_TEXT_1024,
                "change": Enum(("camera_add", "add", "camera_streaming")),
                "creation_time": nullable(text(64)),
                "metadata": nullable(STREAM_METADATA),
            },
            required=("camera_id", "camera_url", "change"),
        ),
        "headers": HEADERS,
    },
    required=("key", "value"),
)
VIOS_COMMON: dict[str, Schema] = {
    "camera_name": nullable(text(256)),
    "camera_type": CAMERA_TYPE,
    "camera_vod_url": OPTIONAL_TEXT_1024,
    "tags": OPTIONAL_TEXT_1024,
    "metadata": nullable(FREE_OBJECT),
    "headers": HEADERS,
}
VIOS_ENVELOPE: dict[str, Schema] = {
    "alert_type": text(128),
    "created_at": text(64),
    "source": text(256),
}
VIOS_ADD = Object(
    {
        **VIOS_ENVELOPE,
        "event": Object(
            {
                "camera_id": IDENTIFIER,
                **VIOS_COMMON,
                "camera_url": Text(1024, r"^(rtsp://|file://|https?://|/|$)"),
                "change": Enum(("camera_add", "add", "camera_streaming")),
            },
            required=("camera_id", "camera_url", "change"),
            extra=True,
        ),
    },
    required=("alert_type", "created_at", "source", "event"),
    extra=True,
)
STREAM_REMOVE = Object(
    {
        "key": text(256),
        "value": Object(
            {
                "camera_id": text(256),
                "camera_name": nullable(text(256)),
                "camera_url": nullable(Text(1024, r"^(rtsp://|file://|https?://)")),
                "camera_type": CAMERA_TYPE,
                "camera_vod_url": OPTIONAL_TEXT_1024,
                "tags": OPTIONAL_TEXT_1024,
                "change": Enum(("camera_remove", "remove")),
                "metadata": nullable(STREAM_METADATA),
            },
            required=("camera_id", "change"),
        ),
        "headers": HEADERS,
    },
    required=("key", "value"),
)
VIOS_REMOVE = Object(
    {
        **VIOS_ENVELOPE,
        "event": Object(
            {
                "camera_id": text(256),
                **VIOS_COMMON,
                "camera_url": nullable(Text(1024, r"^(rtsp://|file://|https?://|/|$)")),
                "change": Enum(("camera_remove", "remove")),
            },
            required=("camera_id", "change"),
            extra=True,
        ),
    },
    required=("alert_type", "created_at", "source", "event"),
    extra=True,
)
MESSAGE_BUS = Enum(("kafka", "redis"))
CONFIG_REQUEST = Object(
    {
        "alert_type": text(128),
        "created_at": text(64),
        "txn_id": text(64),
        "event": Object(
            {
                "camera_id": text(256),
                "name": nullable(text(256)),
                "camera_url": text(1024),
                "change": CHANGE,
                "metadata": Object(
                    {
                        "messagingbus": MESSAGE_BUS,
                        "region": nullable(text(256)),
                        "group": nullable(text(256)),
                        "topic-prefix": text(256),
                        "errorbus": nullable(MESSAGE_BUS),
                        "error-topic-prefix": nullable(text(256)),
                        "create-topic": Boolean(),
                        "topic-partition": nullable(Integer(1, 100000)),
                    },
                    required=("messagingbus", "topic-prefix"),
                ),
                "headers": nullable(
                    Object({"source": nullable(text(256)), "created_at": nullable(text(64))})
                ),
            },
            required=("change", "metadata"),
        ),
        "source": text(256),
    },
    required=("alert_type", "created_at", "txn_id", "event", "source"),
)
TOPIC_SUFFIX = "rtvi-vlm-captions"
ERROR_TOPIC_SUFFIX = "rtvi-vlm-errors"
_DESCRIPTION_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.\-\"' ,]")


def _event(body: dict[str, object]) -> dict[str, object]:
    """The camera fields of either request shape."""
    inner = body["value"] if "key" in body else body["event"]
    assert isinstance(inner, dict)
    return inner


def _parse(request: Request, strict: Object, vios: Object) -> dict[str, object]:
    raw = validation.body_json(request)
    if isinstance(raw, dict) and "key" in raw:
        return schema.json_body(raw, strict)
    return schema.json_body(raw, vios)


class BusConfig:
    """The last ``/v1/config`` settings, for ``/emulator/state``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, object] | None = None

    def set(self, value: dict[str, object]) -> None:
        with self._lock:
            self._current = value

    def get(self) -> dict[str, object] | None:
        with self._lock:
            return self._current


def register(router: Router, table: StreamTable, knobs: Knobs, bus: BusConfig) -> None:
    @router.route("POST", "/v1/stream/add")
    def add(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            event = _event(_parse(request, STREAM_ADD, VIOS_ADD))
        except Invalid as exc:
            return validation.invalid_response(exc)
        camera_id = str(event["camera_id"])
        url = str(event["camera_url"])
        if not url.startswith("rtsp://") or event.get("camera_type") not in (None, "rtsp"):
            return Response.error(400, "BadParameters", "Only rtsp cameras are supported")
        existing = table.by_camera(camera_id)
        if existing is not None and not existing.draining:
            return Response.json(200, _added(camera_id, existing.id))
        name = event.get("camera_name")
        description = _DESCRIPTION_NOT_ALLOWED.sub("_", str(name or ""))[:256]
        outcome = table.add(
            NewStream(
                url[:256],
                description,
                None,
                None,
                None,
                places_of({}),
                camera_id=camera_id,
                camera_name=None if name is None else str(name),
            )
        )
        if isinstance(outcome, tuple):
            _status, code, _message = outcome
            return Response.error(400, code, "The camera cannot be added now")
        return Response.json(200, _added(camera_id, outcome))

    @router.route("POST", "/v1/stream/remove")
    def remove(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            event = _event(_parse(request, STREAM_REMOVE, VIOS_REMOVE))
        except Invalid as exc:
            return validation.invalid_response(exc)
        camera_id = str(event["camera_id"])
        stream = table.by_camera(camera_id)
        if stream is None:
            return Response.error(400, "InvalidParameter", "No such camera")
        outcome = table.start_drain(stream.id, knobs.values.drain_s)
        if isinstance(outcome, tuple):
            status, code, _message = outcome
            return Response.error(status, code, "The camera is in use")
        table.drain_later([stream.id], outcome)
        return Response.json(
            200, {"camera_id": camera_id, "asset_id": stream.id, "status": "removed"}
        )

    @router.route("GET", "/v1/stream/get-stream-info")
    def info(state: ServiceState, _request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        listed = []
        for index, stream in enumerate(table.listing()):
            listed.append(
                {
                    "camera_id": stream.camera_id or stream.sensor_name or stream.id,
                    "camera_name": stream.camera_name,
                    "camera_url": stream.url,
                    "asset_id": stream.id,
                    "source_id": index,
                    "sensor_id": stream.sensor_name or None,
                    "inference_active": table.in_use(stream.id),
                    "chunk_duration": stream.chunk_duration,
                    "chunk_overlap_duration": stream.chunk_overlap_duration,
                }
            )
        return Response.json(
            200, {"status": "ok", "stream_count": len(listed), "stream_list": listed}
        )

    @router.route("POST", "/v1/config")
    def config(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            body = schema.json_body(validation.body_json(request), CONFIG_REQUEST)
        except Invalid as exc:
            return validation.invalid_response(exc)
        event = body["event"]
        assert isinstance(event, dict)
        metadata = event["metadata"]
        assert isinstance(metadata, dict)
        errorbus = metadata.get("errorbus")
        error_prefix = metadata.get("error-topic-prefix")
        answer: dict[str, object] = {
            "txn_id": body["txn_id"],
            "status": "applied",
            "messagingbus": metadata["messagingbus"],
            "topic": f"{metadata['topic-prefix']}{TOPIC_SUFFIX}"[:256],
            "errorbus": errorbus,
            "error_topic": None
            if errorbus is None
            else f"{error_prefix or metadata['topic-prefix']}{ERROR_TOPIC_SUFFIX}"[:256],
            "source": body["source"],
            "created_at": body["created_at"],
            "warnings": [],
        }
        bus.set(answer)
        return Response.json(200, answer)


def _added(camera_id: str, asset_id: str) -> dict[str, object]:
    return {"camera_id": camera_id, "asset_id": asset_id, "status": "added", "inference": False}

