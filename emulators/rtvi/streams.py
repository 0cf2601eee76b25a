"""Live streams: ``/v1/streams/add``, ``get-stream-info``, ``delete/{id}`` and ``delete-batch``.

Each registered stream owns a real decoder (``ingest.Decoder``) from the moment it is added until
its drain window has passed. With ``RTVI_EMU_NO_DECODE=1`` the decoder is never started (no
ffmpeg, no thread): everything else here -- validation, duplicates, capacity, listing, drain --
is unchanged, and the admin state shows ``decoder_running: false`` with no frames.

Choices where the real service's behaviour is not published:

- Validation is all-or-nothing: one malformed entry fails the whole request with 422 (as a
  pydantic body model would). Run-time refusals are per entry: duplicate ID (409
  ``DuplicateStreamId``) and capacity (503 ``ServerBusy``) go into ``errors`` as
  ``{"id", "liveStreamUrl", "error", "error_code", "status_code"}`` (the delete-batch shape, keyed
  by ``id``). When no entry was admitted and every error has the same status, that status is the
  response status and the body is ``{"code", "message", "results": [], "errors": [...]}``.
- Two entries of one request with the same ``id``: the second is a duplicate.
- ``username``/``password`` are used for decoding only and never returned or logged;
  ``sensor_name`` and ``place_*`` strings are echoed by ``get-stream-info``.
- Capacity counts live streams; draining ones no longer count (their slot is being released).
- Drain: a deleted stream stays listed (``"status": "draining"``) until its window passes, then
  its decoder is killed and it disappears. Window = ``RTVI_EMU_DRAIN_S`` capped by
  ``drain_timeout_seconds``. A batch drains its streams in parallel (one window); a single
  ``DELETE /v1/streams/delete/{id}`` blocks for one window and answers once the stream is gone,
  which is why N single deletes cost about N windows. A non-blocking batch answers at once; a
  blocking one after its window.
- Deleting a stream that is already draining is not an error: it is reported as deleted again and
  keeps its earlier deadline.
- Unknown IDs: 404 ``NotFound``; an ID that is not a UUID: 400 ``BadParameter`` (batch) or 404
  (path). A stream with an active caption request: 409 ``ResourceInUse``.
- While the model loads, every endpoint here answers 503 like ready does.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from emulators.rtvi import ingest, validation
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.state import ServiceState
from emulators.rtvi.validation import Invalid

MAX_ENTRIES = 256
MAX_URL_LEN = 256
MAX_DESCRIPTION_LEN = 256
MAX_DRAIN_TIMEOUT_S = 3600
DESCRIPTION_RE = re.compile(r"^[A-Za-z0-9_.\-\"' ,]*\Z")
STREAM_KEYS = ("liveStreamUrl", "description", "id", "username", "password", "sensor_name")
PLACE_PREFIX = "place_"
BATCH_KEYS = ("stream_ids", "blocking", "drain_timeout_seconds")


def loading_response() -> Response:
    return Response.error(503, "ServiceUnavailable", "Model is loading")


@dataclass
class Stream:
    """One registered live stream."""

    id: str
    url: str
    description: str
    echoed: dict[str, str]  # sensor_name, place_*
    decoder: ingest.Decoder
    added_unix: float = field(default_factory=time.time)
    drain_deadline: float | None = None  # monotonic; set once deletion started
    chunk_duration: float = 0.0
    chunk_overlap_duration: float = 0.0

    @property
    def draining(self) -> bool:
        return self.drain_deadline is not None

    def info(self) -> dict[str, object]:
        return {
            "id": self.id,
            "liveStreamUrl": self.url,
            "description": self.description,
            "chunk_duration": self.chunk_duration,
            "chunk_overlap_duration": self.chunk_overlap_duration,
            "status": "draining" if self.draining else "active",
            "added_at": self.added_unix,
            **self.echoed,
        }


@dataclass(frozen=True)
class NewStream:
    url: str
    description: str
    id: str | None
    username: str | None
    password: str | None
    echoed: dict[str, str]


class StreamTable:
    """All registered streams; ``in_use`` tells whether a caption request holds a stream."""

    def __init__(self, knobs: Knobs, decode: bool = True) -> None:
        self._knobs = knobs
        self._decode = decode  # False: register only (RTVI_EMU_NO_DECODE)
        self._lock = threading.Lock()
        self._streams: dict[str, Stream] = {}
        self.in_use: Callable[[str], bool] = lambda _stream_id: False

    # --- queries ---------------------------------------------------------------------------

    def get(self, stream_id: str) -> Stream | None:
        with self._lock:
            return self._streams.get(stream_id)

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
            decoder = ingest.Decoder(url, stream_id[:8])
            self._streams[stream_id] = Stream(
                stream_id, entry.url, entry.description, entry.echoed, decoder
            )
        if self._decode:
            decoder.start()
        return stream_id

    def start_drain(self, stream_id: str, window_s: float) -> tuple[int, str, str] | float:
        """Mark draining; the monotonic deadline, or (status, code, message) when refused."""
        with self._lock:
            stream = self._streams.get(stream_id)
            if stream is None:
                return 404, "NotFound", f"stream {stream_id} not found"
            if stream.drain_deadline is not None:
                return stream.drain_deadline
            if self.in_use(stream_id):
                return 409, "ResourceInUse", f"stream {stream_id} has an active caption request"
            stream.drain_deadline = time.monotonic() + window_s
            return stream.drain_deadline

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
    body = validation.json_object(request)
    validation.only_keys(body, ("streams",))
    entries = validation.require(body, "streams")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
        raise Invalid(f"body.streams: expected a list of 1..{MAX_ENTRIES} entries")
    return [_parse_entry(entry, f"body.streams[{index}]") for index, entry in enumerate(entries)]


def _parse_entry(entry: object, where: str) -> NewStream:
    if not isinstance(entry, dict):
        raise Invalid(f"{where}: expected an object")
    extra = [key for key in entry if key not in STREAM_KEYS and not key.startswith(PLACE_PREFIX)]
    validation.only_keys({key: None for key in extra}, (), where)
    url = validation.string(
        validation.require(entry, "liveStreamUrl", where), f"{where}.liveStreamUrl", MAX_URL_LEN
    )
    if not url.startswith("rtsp://"):
        raise Invalid(f"{where}.liveStreamUrl: must match ^rtsp://")
    description = validation.string(
        validation.require(entry, "description", where), f"{where}.description", MAX_DESCRIPTION_LEN
    )
    if not DESCRIPTION_RE.match(description):
        raise Invalid(f"{where}.description: only [A-Za-z0-9_.-\"' ,] allowed")
    stream_id = None
    if entry.get("id") is not None:
        stream_id = validation.uuid_text(entry["id"], f"{where}.id")
    optional: dict[str, str] = {}
    for key in ("username", "password", "sensor_name"):
        if entry.get(key) is not None:
            optional[key] = validation.string(entry[key], f"{where}.{key}", MAX_URL_LEN)
    echoed = {k: v for k, v in optional.items() if k == "sensor_name"}
    for key, value in entry.items():
        if key.startswith(PLACE_PREFIX) and value is not None:
            echoed[key] = validation.string(value, f"{where}.{key}", MAX_URL_LEN)
    return NewStream(
        url, description, stream_id, optional.get("username"), optional.get("password"), echoed
    )


@dataclass(frozen=True)
class BatchDelete:
    stream_ids: list[str]
    blocking: bool
    drain_timeout_s: float | None


def parse_batch(request: Request) -> BatchDelete:
    body = validation.json_object(request)
    validation.only_keys(body, BATCH_KEYS)
    ids = validation.require(body, "stream_ids")
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_ENTRIES:
        raise Invalid(f"body.stream_ids: expected a list of 1..{MAX_ENTRIES} IDs")
    stream_ids = [validation.string(item, f"body.stream_ids[{i}]") for i, item in enumerate(ids)]
    blocking = validation.boolean(body.get("blocking", False), "body.blocking")
    timeout = body.get("drain_timeout_seconds")
    drain_timeout = (
        None
        if timeout is None
        else validation.number(timeout, "body.drain_timeout_seconds", 0, MAX_DRAIN_TIMEOUT_S)
    )
    return BatchDelete(stream_ids, blocking, drain_timeout)


def _canonical(stream_id: str) -> str | None:
    try:
        return str(uuid.UUID(stream_id))
    except ValueError:
        return None


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
        statuses = {error["status_code"] for error in errors}
        if not results and len(statuses) == 1:
            first = errors[0]
            return Response.json(
                int(str(first["status_code"])),
                {
                    "code": first["error_code"],
                    "message": first["error"],
                    "results": [],
                    "errors": errors,
                },
            )
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
        stream_id = _canonical(request.params["stream_id"]) or request.params["stream_id"]
        outcome = table.start_drain(stream_id, knobs.values.drain_s)
        if isinstance(outcome, tuple):
            status, code, message = outcome
            return Response.error(status, code, message)
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
        if batch.drain_timeout_s is not None:
            window = min(window, batch.drain_timeout_s)
        deleted: list[str] = []
        errors: list[dict[str, object]] = []
        latest = time.monotonic()
        for raw_id in batch.stream_ids:
            stream_id = _canonical(raw_id)
            if stream_id is None:
                errors.append(_batch_error(raw_id, 400, "BadParameter", "not a valid UUID"))
                continue
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
