"""Live streams: ``/v1/streams/add``, ``get-stream-info``, ``delete/{id}`` and ``delete-batch``.

Each registered stream owns a real decoder (``ingest.Decoder``) from the moment it is added until
its drain window has passed. With ``RTVI_EMU_NO_DECODE=1`` the decoder is never started (no
ffmpeg, no thread): everything else here -- validation, duplicates, capacity, listing, drain --
is unchanged, and the admin state shows ``decoder_running: false`` with no frames. Bodies are
the spec's ``AddLiveStreams`` and ``DeleteLiveStreamsRequest`` (strict: unknown keys, wrong types
or bounds give 422); answers are ``AddLiveStreamsResponse``, ``LiveStreamInfo`` and
``DeleteLiveStreamsResponse``.

Choices where the real service's behaviour is not published:

- Validation is all-or-nothing: one malformed entry fails the whole request with 422 (as a
  pydantic body model does). Run-time refusals are per entry inside a 200: duplicate ID (409
  ``DuplicateStreamId``) and capacity (503 ``ServerBusy``) go into ``errors`` as ``{"id",
  "liveStreamUrl", "error", "error_code", "status_code"}`` (the delete-batch shape, keyed by
  ``id``). One exception, as the VSS harness (the service team's own client) expects: an add
  whose every entry was refused at capacity answers HTTP 503 ``ServerBusy`` (the spec lists no
  503 here; the ``capacity_refusal`` knob ``in-200`` keeps the refusals inside a 200).
- Two entries of one request with the same ``id``: the second is a duplicate.
- ``username``/``password`` are used for decoding only and never returned or logged. The seven
  ``place_*`` fields are echoed by ``get-stream-info`` (``place_name``/``place_type`` as strings,
  ``""`` when absent or null; the five numbers as numbers or null); ``sensor_name`` is kept for
  ``/v1/stream/get-stream-info`` (``LiveStreamInfo`` has no such field).
- Capacity counts live streams; draining ones no longer count (their slot is being released).
- Drain: a deleted stream stays listed until its window passes, then its decoder is killed and
  it disappears (``/emulator/state`` shows ``"status": "draining"``; ``LiveStreamInfo`` has no
  status field). Window = ``RTVI_EMU_DRAIN_S`` capped by ``drain_timeout_seconds``. A batch drains
  its streams in parallel (one window); a single ``DELETE /v1/streams/delete/{id}`` blocks for one
  window and answers once the stream is gone, which is why N single deletes cost about N windows.
  A non-blocking batch answers at once; a blocking one after its window.
- Deleting a stream that is already draining is not an error: it is reported as deleted again and
  keeps its earlier deadline.
- Unknown IDs: 400 ``InvalidParameter`` (as the real service: the spec documents no 404), inside
  ``errors`` for a batch; an ID that is not a UUID: 422 (path or batch body). A stream under
  the ``stuck_delete`` fault: 409 ``ResourceInUse``. A stream with an active caption request:
  that request is ended (its event stream closes with ``[DONE]``) and the stream deleted, as
  the VSS harness's ``single_live_stream`` expects; with the ``delete_in_use`` knob
  ``refuse``, 409 ``ResourceInUse`` instead.
- While the model loads every endpoint here answers 500 ``ServiceUnavailable`` (the spec documents
  503 only for captions, chat and the health probes).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from emulators.rtvi import ingest, schema, validation
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.schema import (
    DESCRIPTION_PATTERN,
    UUID,
    AnyOf,
    Array,
    Boolean,
    Null,
    Number,
    Object,
    Text,
    nullable,
    text,
)
from emulators.rtvi.state import ServiceState
from emulators.rtvi.validation import Invalid

MAX_ENTRIES = 256
MAX_DRAIN_TIMEOUT_S = 3600
PLACE_TEXTS = ("place_name", "place_type")
PLACE_NUMBERS = {
    "place_lat": 90.0,
    "place_lon": 180.0,
    "place_alt": 1_000_000.0,
    "place_coordinate_x": 1_000_000.0,
    "place_coordinate_y": 1_000_000.0,
}
CREDENTIAL = Text(256, DESCRIPTION_PATTERN)
# The spec's AddLiveStream, field by field.
ADD_STREAM = Object(
    {
        "liveStreamUrl": Text(256, r"^rtsp://"),
        "description": Text(256, DESCRIPTION_PATTERN),
        "username": CREDENTIAL,
        "password": CREDENTIAL,
        **{key: nullable(text(256)) for key in PLACE_TEXTS},
        **{key: nullable(Number(-bound, bound)) for key, bound in PLACE_NUMBERS.items()},
        "id": AnyOf((UUID, Null())),
        "sensor_name": text(256),
    },
    required=("liveStreamUrl", "description"),
)
ADD_STREAMS = Object({"streams": Array(ADD_STREAM, MAX_ENTRIES, 1)}, required=("streams",))
DELETE_BATCH = Object(
    {
        "stream_ids": Array(UUID, MAX_ENTRIES, 1),
        "blocking": Boolean(),
        "drain_timeout_seconds": nullable(Number(0, MAX_DRAIN_TIMEOUT_S)),
    },
    required=("stream_ids",),
)
LOADING_CODE = "ServiceUnavailable"
LOADING_MESSAGE = "Model is loading"


def loading_response(status: int = 500) -> Response:
    """While the model loads: 503 where the operation documents it, else 500."""
    return Response.error(status, LOADING_CODE, LOADING_MESSAGE)


def no_such_stream() -> Response:
    return Response.error(400, "InvalidParameter", "No such live-stream")


@dataclass
class Stream:
    """One registered live stream."""

    id: str
    url: str
    description: str
    places: dict[str, object]  # the seven place_* fields, always present
    decoder: ingest.Decoder
    sensor_name: str = ""
    camera_id: str | None = None  # set when added through /v1/stream/add
    camera_name: str | None = None
    added_unix: float = field(default_factory=time.time)
    drain_deadline: float | None = None  # monotonic; set once deletion started
    chunk_duration: int = 0
    chunk_overlap_duration: int = 0

    @property
    def draining(self) -> bool:
        return self.drain_deadline is not None

    def info(self) -> dict[str, object]:
        """The spec's ``LiveStreamInfo``."""
        return {
            "id": self.id,
            "liveStreamUrl": self.url,
            "description": self.description,
            "chunk_duration": self.chunk_duration,
            "chunk_overlap_duration": self.chunk_overlap_duration,
            **self.places,
        }


@dataclass(frozen=True)
class NewStream:
    url: str
    description: str
    id: str | None
    username: str | None
    password: str | None
    places: dict[str, object]
    sensor_name: str = ""
    camera_id: str | None = None
    camera_name: str | None = None


def places_of(entry: dict[str, object]) -> dict[str, object]:
    places: dict[str, object] = {key: entry.get(key) or "" for key in PLACE_TEXTS}
    places.update({key: entry.get(key) for key in PLACE_NUMBERS})
    return places


class StreamTable:
    """All registered streams; ``in_use`` tells whether a caption request holds a stream and
    ``stuck`` whether the ``stuck_delete`` fault refuses its deletion."""

    def __init__(self, knobs: Knobs, decode: bool = True) -> None:
        self._knobs = knobs
        self._decode = decode  # False: register only (RTVI_EMU_NO_DECODE)
        self._lock = threading.Lock()
        self._streams: dict[str, Stream] = {}
        self.in_use: Callable[[str], bool] = lambda _stream_id: False
        self.stuck: Callable[[str], bool] = lambda _stream_id: False
        self.release: Callable[[str], None] = lambda _stream_id: None

    # --- queries ---------------------------------------------------------------------------

    def get(self, stream_id: str) -> Stream | None:
        with self._lock:
            return self._streams.get(stream_id)

    def by_camera(self, camera_id: str) -> Stream | None:
        with self._lock:
            for stream in self._streams.values():
                if camera_id in (stream.camera_id, stream.id):
                    return stream
            return None

    def listing(self) -> list[Stream]:
        with self._lock:
            return list(self._streams.values())

    def live_count(self) -> int:
        with self._lock:
            return sum(1 for stream in self._streams.values() if not stream.draining)

    # --- changes ---------------------------------------------------------------------------

    def add(self, entry: NewStream) -> tuple[int, str, str] | str:
        """The new stream's ID, or (status, code, message) when refused."""
        stream_id = entry.id or str(uuid.uuid4())
        limit = self._knobs.values.max_streams
        with self._lock:
            if stream_id in self._streams:
                return 409, "DuplicateStreamId", f"stream {stream_id} already exists"
            live = sum(1 for stream in self._streams.values() if not stream.draining)
            if limit is not None and live >= limit:
                return 503, "ServerBusy", f"at capacity: {live} of {limit} streams active"
            url = ingest.with_credentials(entry.url, entry.username, entry.password)
            decoder = ingest.Decoder(url, stream_id[:8],
                                     lambda: self._knobs.values.ingest_delay_s)
            self._streams[stream_id] = Stream(
                stream_id,
                entry.url,
                entry.description,
                entry.places,
                decoder,
                entry.sensor_name,
                entry.camera_id,
                entry.camera_name,
            )
        delay = self._knobs.values.decode_delay_s
        if self._decode and delay > 0:  # a decoder stopped meanwhile (deleted) starts idle
            timer = threading.Timer(delay, decoder.start)
            timer.daemon = True
            timer.start()
        elif self._decode:
            decoder.start()
        return stream_id

    def start_drain(self, stream_id: str, window_s: float) -> tuple[int, str, str] | float:
        """Mark draining; the monotonic deadline, or (status, code, message) when refused.
        A caption request holding the stream is ended once the stream is marked draining
        (so none can start on it meanwhile), unless the ``delete_in_use`` knob says
        ``refuse`` (then: 409)."""
        end_requests = self._knobs.values.delete_in_use == "end"
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None:
                return 400, "InvalidParameter", f"No such live-stream {stream_id}"
            if stream.drain_deadline is not None:
                return stream.drain_deadline
            if self.stuck(stream_id) or (self.in_use(stream_id) and not end_requests):
                return 409, "ResourceInUse", f"Resource {stream_id} is currently being used"
            stream.drain_deadline = deadline = time.monotonic() + window_s
        if end_requests:  # draining first, so no new request starts on it; then end the others
            self.release(stream_id)  # outside the lock: closing a request reads the table
        return deadline

    def finish_drain(self, stream_ids: list[str]) -> None:
        """Remove drained streams and kill their decoders (in parallel, then wait)."""
        gone: list[Stream] = []
        now = time.monotonic()
        with self._lock:
            for stream_id in stream_ids:
                stream = self._streams.get(stream_id)
                deadline = None if stream is None else stream.drain_deadline
                if stream is not None and deadline is not None and deadline <= now + 1e-3:
                    gone.append(self._streams.pop(stream_id))
        for stream in gone:
            stream.decoder.stop()

    def drain_later(self, stream_ids: list[str], deadline: float) -> threading.Thread:
        def run() -> None:
            time.sleep(max(0.0, deadline - time.monotonic()))
            self.finish_drain(stream_ids)

        thread = threading.Thread(target=run, name="stream-drain", daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        with self._lock:
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            stream.decoder.stop()


# --- request parsing -------------------------------------------------------------------------


def parse_add(request: Request) -> list[NewStream]:
    body = schema.json_body(validation.body_json(request), ADD_STREAMS)
    entries = body["streams"]
    assert isinstance(entries, list)
    return [_entry(entry) for entry in entries]


def _entry(entry: dict[str, object]) -> NewStream:
    stream_id = entry.get("id")
    return NewStream(
        url=str(entry["liveStreamUrl"]),
        description=str(entry["description"]),
        id=None if stream_id is None else str(uuid.UUID(str(stream_id))),
        username=str(entry["username"]) if entry.get("username") else None,
        password=str(entry["password"]) if entry.get("password") else None,
        places=places_of(entry),
        sensor_name=str(entry.get("sensor_name") or ""),
    )


@dataclass(frozen=True)
class BatchDelete:
    stream_ids: list[str]
    blocking: bool
    drain_timeout_s: float | None


def parse_batch(request: Request) -> BatchDelete:
    body = schema.json_body(validation.body_json(request), DELETE_BATCH)
    ids = body["stream_ids"]
    assert isinstance(ids, list)
    timeout = body.get("drain_timeout_seconds")
    return BatchDelete(
        [str(uuid.UUID(str(item))) for item in ids],
        bool(body.get("blocking", False)),
        None if timeout is None else float(timeout),  # type: ignore[arg-type]
    )


# --- handlers --------------------------------------------------------------------------------


def register(router: Router, table: StreamTable, knobs: Knobs) -> None:
    """Add this group's routes."""

    @router.route("POST", "/v1/streams/add")
    def add(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            entries = parse_add(request)
        except Invalid as exc:
            return validation.invalid_response(exc)
        results: list[dict[str, object]] = []
        errors: list[dict[str, object]] = []
        for entry in entries:
            outcome = table.add(entry)
            if isinstance(outcome, str):
                results.append({"id": outcome})
                continue
            status, code, message = outcome
            errors.append(
                {
                    "id": entry.id,
                    "liveStreamUrl": entry.url,
                    "error": message,
                    "error_code": code,
                    "status_code": status,
                }
            )
        busy = [e for e in errors if e["status_code"] == 503]
        if not results and busy and len(busy) == len(errors) and (
                knobs.values.capacity_refusal == "503"):
            return Response.error(503, "ServerBusy", str(busy[0]["error"]))
        return Response.json(200, {"results": results, "errors": errors})

    @router.route("GET", "/v1/streams/get-stream-info")
    def info(state: ServiceState, _request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        return Response.json(200, [stream.info() for stream in table.listing()])

    @router.route("DELETE", "/v1/streams/delete/{stream_id}")
    def delete_one(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            stream_id = schema.uuid_param(request.params["stream_id"], "path.stream_id")
        except Invalid as exc:
            return validation.invalid_response(exc)
        outcome = table.start_drain(stream_id, knobs.values.drain_s)
        if isinstance(outcome, tuple):
            status, code, message = outcome
            return Response.error(status, code, message.replace(f" {stream_id}", ""))
        time.sleep(max(0.0, outcome - time.monotonic()))
        table.finish_drain([stream_id])
        return Response.json(200, {"id": stream_id, "deleted": True})

    @router.route("DELETE", "/v1/streams/delete-batch")
    def delete_batch(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            batch = parse_batch(request)
        except Invalid as exc:
            return validation.invalid_response(exc)
        window = knobs.values.drain_s
        if knobs.values.legacy_delete and (batch.blocking or batch.drain_timeout_s is not None):
            return Response.json(422, {"error_code": "InvalidParameter", "error_message":
                                       "unknown fields: blocking, drain_timeout_seconds"})
        if batch.drain_timeout_s is not None:
            window = min(window, batch.drain_timeout_s)
        deleted: list[str] = []
        errors: list[dict[str, object]] = []
        latest = time.monotonic()
        for stream_id in batch.stream_ids:
            outcome = table.start_drain(stream_id, window)
            if isinstance(outcome, tuple):
                errors.append(_batch_error(stream_id, *outcome))
                continue
            if stream_id not in deleted:
                deleted.append(stream_id)
            latest = max(latest, outcome)
        if batch.blocking:
            time.sleep(max(0.0, latest - time.monotonic()))
            table.finish_drain(deleted)
        elif deleted:
            table.drain_later(deleted, latest)
        return Response.json(200, {"deleted": deleted, "errors": errors})


def _batch_error(stream_id: str, status: int, code: str, message: str) -> dict[str, object]:
    return {"stream_id": stream_id, "error": message, "error_code": code, "status_code": status}
