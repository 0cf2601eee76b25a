"""Captions: ``POST /v1/generate_captions`` and ``DELETE /v1/generate_captions/{stream_id}``.

A caption request cuts each of its streams' timelines into chunks and, at the end of every chunk,
describes the frames that stream's decoder delivered during it. Nothing is invented: a chunk in
which no fresh frame arrived says so and reports ``frame_count`` 0.

The body is the spec's ``VlmQuery``, checked strictly (``CAPTION_QUERY``). Results follow the
spec's ``VlmCaptionResponse`` (chunk) and ``VlmCaptionsCompletionResponse`` (wrapper), in the
shape the ``caption_shape`` knob selects (``RTVI_EMU_CAPTION_SHAPE``, default ``wrapped``, the
real service's shape and the only one the VSS harness reads latency from):

- ``flat``: each SSE event is one chunk, a bare ``VlmCaptionResponse``; the non-streaming body is
  that chunk too when the request names one stream (a flat body can hold only one chunk: with
  several streams the body is the wrapped one).
- ``wrapped``: each SSE event, and the non-streaming body, is a ``VlmCaptionsCompletionResponse``
  ``{id, created, model, media_info, chunk_responses: [...]}`` (plus ``usage`` in the body).
- In both shapes the usage event (``stream_options.include_usage``) is wrapped, with
  ``chunk_responses: []`` and ``usage`` (``CompletionUsage``), then ``data: [DONE]``.

Choices where the real service's behaviour is not published:

- ``chunk_duration`` 0 means "no chunking" for files; a live stream must be cut somewhere, so it
  gets ``DEFAULT_LIVE_CHUNK_S`` (2 s). ``chunk_overlap_duration`` widens the frame window
  backwards (a negative one counts as 0); it must stay below the chunk (else 400).
- ``start_time``/``end_time`` are the chunk's wall-clock window as ISO-8601 UTC strings; ``id``
  of the wrapper is the request ID (``X-Request-Id``).
- ``media_info`` of a chunk is ``{"type": "timestamp"}`` with the stamps of the chunk's first and
  last frames as they arrived from the source (the window's ends when it has no frame), so a
  client's "receive time - ``end_timestamp``" includes transport and queueing (the
  ``ingest_delay_s`` knob injects some). The closing usage event describes no chunk: its
  ``media_info`` is an ``offset`` one (the request's span), never a ``timestamp``.
- The spec carries no stream ID in a result: a client that must tell streams apart opens one
  request per stream (as the product does). ``chunk_id`` counts chunks per stream from 0 and
  wraps at the spec's maximum (100000).
- Latencies are measured: ``decode_latency_ms`` is the time to select and analyse the chunk's
  frames, ``vlm_latency_ms`` the (really slept) simulated model time ``RTVI_EMU_LATENCY_MS +
  RTVI_EMU_LATENCY_PER_STREAM_MS * live streams``, ``queue_time_s`` the wait between chunk end and
  the start of its processing (streams of one request are processed in turn), and
  ``chunk_latency_ms``/``processing_latency_s`` chunk end to answer.
- Tokens: ``input_tokens`` = words of the prompt + ``TOKENS_PER_FRAME`` per frame; ``output_tokens``
  = words of the content (capped by ``max_tokens``).
- ``stream: true``: SSE, one event per stream and chunk, kept open until the client disconnects
  or the request is stopped. ``stream: false``: the answer comes after the first chunk of every
  stream.
- ``id`` must name registered live streams, or uploaded files only (``filecaptions``: one
  chunk per file, not streamed); ``url`` and ``media_info`` offsets are accepted by validation
  but not served (400). An empty list is 400.
- The request is "active" while its SSE connection lives. Deleting one of its streams ends it
  (usage event, ``[DONE]``) unless the ``delete_in_use`` knob is ``refuse`` (then 409).
- A stopped request ends within ``WAIT_SLICE_S`` even when behind schedule or mid-chunk: the
  stop flag is looked at before the schedule, and the simulated model time is a wait on it.
- Several requests may caption one stream ("subscribers") when their decode settings match; a
  different setting gives 400 ``BadParameters``. ``DELETE .../{stream_id}`` stops the one
  request on that stream (all streams of it); with several and no ``request_id``, or none at
  all, it answers 400 (the spec documents no 404 or 409 there); a malformed ID is 422.
- Capacity: 503 ``ServerBusy`` when live streams exceed ``max_streams`` or when the streams being
  captioned, with this request's, would. While the model loads: 503 ``ServiceUnavailable``.
- ``model`` is echoed, not checked against ``/v1/models``.
- Behaviour faults (``faults``) can swap or mix two streams' frames, skip chunk IDs, put an
  ``error`` into 200 events, or empty the content.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from emulators.rtvi import filecaptions, schema, validation
from emulators.rtvi.faults import FaultTable
from emulators.rtvi.filecaptions import TOKENS_PER_FRAME
from emulators.rtvi.files import FileStore
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router, StreamWriter
from emulators.rtvi.schema import (
    FREE_OBJECT,
    IDENTIFIER,
    AnyOf,
    Array,
    Boolean,
    Enum,
    Integer,
    Number,
    Object,
    Text,
    nullable,
    text,
)
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import StreamTable, loading_response, no_such_stream
from emulators.rtvi.validation import Invalid

DEFAULT_LIVE_CHUNK_S = 2
MAX_IDS = 50
MAX_CHUNK_ID = 100_000
WAIT_SLICE_S = 0.1  # how often a waiting request checks for stop and client disconnect
SSE_CONTENT_TYPE = "text/event-stream"
NO_FRAME_CONTENT = "No new frame was decoded from the stream during this chunk."
EVENT_ERROR = {"code": "InternalError", "message": "VLM inference failed for this chunk"}
DECODE_KEYS = (
    "chunk_duration",
    "chunk_overlap_duration",
    "num_frames_per_second_or_fixed_frames_chunk",
    "use_fps_for_chunking",
    "vlm_input_width",
    "vlm_input_height",
)
GENERATION_TOKENS = Integer(1, 16384)
MEDIA_INFO_OFFSET = Object(
    {
        "type": Enum(("offset",)),
        "start_offset": Integer(0, 4_000_000_000),
        "end_offset": Integer(0, 4_000_000_000),
    },
    required=("type",),
)
# The spec's VlmQuery, field by field.
CAPTION_QUERY = Object(
    {
        "id": AnyOf((IDENTIFIER, Array(IDENTIFIER, MAX_IDS))),
        "url": nullable(Text(2048, r"^(https?://|s3://|file://).*")),
        "url_headers": nullable(FREE_OBJECT),
        "media_type": Text(10, r"^(video|image)$"),
        "creation_time": nullable(text(30)),
        "system_prompt": text(10240),
        "prompt": text(10240),
        "model": text(256),
        "api_type": Text(32, r"^[A-Za-z]*$"),
        "response_format": Object({"type": Enum(("json_object", "text"))}, required=("type",)),
        "stream": Boolean(),
        "stream_options": nullable(Object({"include_usage": Boolean()})),
        "max_tokens": GENERATION_TOKENS,
        "min_tokens": GENERATION_TOKENS,
        "temperature": Number(0, 1),
        "top_p": Number(0, 1),
        "top_k": Number(1, 1000),
        "ignore_eos": nullable(Boolean()),
        "seed": Integer(1, 4294967295),
        "chunk_duration": Integer(0, 3600),
        "chunk_overlap_duration": Integer(-3600, 3600),
        "media_info": nullable(MEDIA_INFO_OFFSET),
        "num_frames_per_second_or_fixed_frames_chunk": Number(-1, 512),
        "use_fps_for_chunking": nullable(Boolean()),
        "vlm_input_width": Integer(0, 4096),
        "vlm_input_height": Integer(0, 4096),
        "enable_reasoning": Boolean(),
        "preserve_reasoning_tags": Boolean(),
        "enable_audio": Boolean(),
        "mm_processor_kwargs": nullable(FREE_OBJECT),
        "media_io_kwargs": nullable(FREE_OBJECT),
        "alert_category": nullable(text(500)),
    },
    required=("id", "prompt", "model"),
)


@dataclass(frozen=True)
class CaptionParams:
    stream_ids: list[str]
    prompt: str
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int
    decode: tuple[tuple[str, object], ...]  # the settings that must match between subscribers
    chunk_s: int
    overlap_s: int


@dataclass
class Session:
    """One active caption request."""

    params: CaptionParams
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: int = field(default_factory=lambda: int(time.time()))
    started_unix: float = field(default_factory=time.time)
    stop: threading.Event = field(default_factory=threading.Event)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    chunks: int = 0


@dataclass
class PipelineTimes:
    """What ``/v1/metrics`` reports under the series the VSS harness reads: decode time as a
    summary (count and sum, from which it takes the mean over a window), and the latest
    chunk's decode, model, pipeline (decode + model) and end-to-end (the last frame's source
    stamp to the answer) times."""

    decode_count: int = 0
    decode_sum_s: float = 0.0
    latest: dict[str, float] = field(default_factory=dict)

    def gauges(self) -> dict[str, float]:
        return {"decode_latency_seconds_count": self.decode_count,
                "decode_latency_seconds_sum": round(self.decode_sum_s, 6),
                **{f"{name}_latency_seconds_latest_seconds": round(value, 6)
                   for name, value in self.latest.items()}}


@dataclass(frozen=True)
class Chunk:
    """One stream's chunk result: the spec's ``VlmCaptionResponse`` plus what wraps it."""

    stream_id: str
    body: dict[str, object]
    media_info: dict[str, object]
    error: bool
    stamped_unix: float = 0.0  # the source stamp of its last frame (the window's end without)


def _canonical(identifier: str) -> str:
    try:
        return str(uuid.UUID(identifier))
    except ValueError:
        return identifier


def parse(request: Request) -> CaptionParams | Response:
    """The request's parameters; raises Invalid (422), or returns a 400 for a schema-valid
    request the service cannot serve."""
    body = schema.json_body(validation.body_json(request), CAPTION_QUERY)
    raw_ids = body["id"]
    listed = raw_ids if isinstance(raw_ids, list) else [raw_ids]
    ids = list(dict.fromkeys(_canonical(str(item)) for item in listed))
    if not ids:
        return Response.error(400, "InvalidParameters", "id names no stream")
    options = body.get("stream_options") or {}
    assert isinstance(options, dict)
    chunk = int(body.get("chunk_duration") or 0)  # type: ignore[call-overload]
    overlap = max(0, int(body.get("chunk_overlap_duration") or 0))  # type: ignore[call-overload]
    chunk_s = chunk if chunk > 0 else DEFAULT_LIVE_CHUNK_S
    if overlap >= chunk_s:
        return Response.error(
            400, "InvalidParameters", "chunk_overlap_duration must be less than chunk_duration"
        )
    return CaptionParams(
        ids,
        str(body["prompt"]),
        str(body["model"]),
        bool(body.get("stream", False)),
        bool(options.get("include_usage", False)),
        int(body.get("max_tokens") or 512),  # type: ignore[call-overload]
        tuple((key, body.get(key)) for key in DECODE_KEYS),
        chunk_s,
        overlap,
    )


def _iso(unix: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _timestamps(start_unix: float, end_unix: float) -> dict[str, object]:
    return {
        "type": "timestamp",
        "start_timestamp": _iso(start_unix),
        "end_timestamp": _iso(end_unix),
    }


class CaptionService:
    """Active caption requests, their chunk loop and counters."""

    def __init__(self, streams: StreamTable, knobs: Knobs, faults: FaultTable) -> None:
        self.streams = streams  # public: file captions (``filecaptions``) read them too
        self.knobs = knobs
        self._faults = faults
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self.chunks_total = 0
        self.empty_chunks_total = 0
        self.times = PipelineTimes()
        streams.in_use = self.stream_in_use
        streams.release = self.release

    def stream_in_use(self, stream_id: str) -> bool:
        with self._lock:
            return any(stream_id in s.params.stream_ids for s in self._sessions.values())

    def active(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def open(self, params: CaptionParams) -> Session | Response:
        """Admit a request, or the error response that refuses it."""
        for stream_id in params.stream_ids:
            stream = self.streams.get(stream_id)
            if stream is None or stream.draining:
                return no_such_stream()
        limit = self.knobs.values.max_streams
        live = self.streams.live_count()
        with self._lock:
            captioned = {i for s in self._sessions.values() for i in s.params.stream_ids}
            wanted = captioned | set(params.stream_ids)
            if limit is not None and (live > limit or len(wanted) > limit):
                return Response.error(
                    503, "ServerBusy", "At capacity, the number of captioned streams is limited"
                )
            for other in self._sessions.values():
                shared = set(other.params.stream_ids) & set(params.stream_ids)
                if shared and other.params.decode != params.decode:
                    return Response.error(
                        400,
                        "BadParameters",
                        "The stream is captioned with other decode settings",
                    )
            session = Session(params)
            self._sessions[session.request_id] = session
        if any((s := self.streams.get(i)) is None or s.draining for i in params.stream_ids):
            self.close(session)  # a delete began meanwhile: it would not see this request
            return no_such_stream()
        for stream_id in params.stream_ids:
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.chunk_duration = params.chunk_s
                stream.chunk_overlap_duration = params.overlap_s
        return session

    def release(self, stream_id: str) -> None:
        """End every request that captions ``stream_id`` (the stream is being deleted): each
        one's event stream then ends with its usage event and ``[DONE]``."""
        with self._lock:
            holding = [s for s in self._sessions.values() if stream_id in s.params.stream_ids]
        for session in holding:
            self.close(session)

    def close(self, session: Session) -> None:
        session.stop.set()
        with self._lock:
            self._sessions.pop(session.request_id, None)
            remaining = {i for s in self._sessions.values() for i in s.params.stream_ids}
        for stream_id in session.params.stream_ids:
            stream = self.streams.get(stream_id)
            if stream is not None and stream_id not in remaining:
                stream.chunk_duration = 0
                stream.chunk_overlap_duration = 0

    def stop(self, stream_id: str, request_id: str | None) -> Response:
        with self._lock:
            on_stream = [s for s in self._sessions.values() if stream_id in s.params.stream_ids]
        if request_id is not None:
            on_stream = [s for s in on_stream if s.request_id == request_id]
        if not on_stream:
            return Response.error(400, "InvalidParameter", "No caption request on this stream")
        if len(on_stream) > 1:
            return Response.error(
                400, "MultipleSubscribers", "Several caption requests, give request_id"
            )
        self.close(on_stream[0])
        return Response.json(
            200, {"stream_id": stream_id, "request_id": on_stream[0].request_id, "stopped": True}
        )

    def shutdown(self) -> None:
        for session in self.active():
            session.stop.set()

    def wait_until(self, session: Session, deadline: float, writer: StreamWriter | None) -> bool:
        """Sleep until ``deadline``; False when stopped or the client went away meanwhile."""
        while True:  # the stop flag first: a request behind schedule still ends at once
            if session.stop.is_set() or (writer is not None and not writer.alive()):
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            session.stop.wait(min(remaining, WAIT_SLICE_S))

    def chunk(
        self,
        session: Session,
        stream_id: str,
        index: int,
        window: tuple[float, float],
        origin: tuple[float, float],
    ) -> Chunk:
        """Describe one stream's chunk ``index`` whose window ``[start, end)`` is monotonic."""
        start, end = window
        origin_mono, origin_unix = origin
        params = session.params
        begun = time.monotonic()
        live = [s.id for s in self.streams.listing() if not s.draining]
        source = self.streams.get(self._faults.frames_source(stream_id, index, live))
        frames = (
            [] if source is None else source.decoder.frames_between(start - params.overlap_s, end)
        )
        tally = Counter(frame.description for frame in frames)
        decoded = time.monotonic()
        session.stop.wait(self.knobs.vlm_latency_s(self.streams.live_count()))
        answered = time.monotonic()
        content = NO_FRAME_CONTENT
        if frames:
            content = f"The frame shows {tally.most_common(1)[0][0]}."
        error = self._faults.event_error(stream_id)
        if error or self._faults.empty_content(stream_id):
            content = ""
        output_tokens = min(len(content.split()), params.max_tokens)
        input_tokens = len(params.prompt.split()) + TOKENS_PER_FRAME * len(frames)
        start_unix = origin_unix + (start - origin_mono)
        end_unix = origin_unix + (end - origin_mono)
        body: dict[str, object] = {
            "chunk_id": self._faults.chunk_id(stream_id, index) % (MAX_CHUNK_ID + 1),
            "start_time": _iso(start_unix),
            "end_time": _iso(end_unix),
            "content": content,
            "decode_latency_ms": round((decoded - begun) * 1000, 3),
            "vlm_latency_ms": round((answered - decoded) * 1000, 3),
            "chunk_latency_ms": round(max(0.0, answered - end) * 1000, 3),
            "queue_time_s": round(max(0.0, begun - end), 6),
            "processing_latency_s": round(max(0.0, answered - end), 6),
            "frame_count": len(frames),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
        }
        stamps = (frames[0].stamped_unix, frames[-1].stamped_unix) if frames else (
            start_unix, end_unix)
        return Chunk(stream_id, body, _timestamps(*stamps), error, stamps[1])

    def run(
        self,
        session: Session,
        writer: StreamWriter | None,
        first_only: bool,
    ) -> list[Chunk]:
        """Produce chunks until stopped (or after the first set); SSE events go to ``writer``."""
        origin = (time.monotonic(), time.time())
        produced: list[Chunk] = []
        index = 0
        while True:
            start = origin[0] + index * session.params.chunk_s
            end = start + session.params.chunk_s
            if not self.wait_until(session, end, writer):
                return produced
            for stream_id in session.params.stream_ids:
                chunk = self.chunk(session, stream_id, index, (start, end), origin)
                if session.stop.is_set():  # stopped while it was processed: never sent
                    return produced
                self._count(session, chunk)
                produced.append(chunk)
                if writer is not None and not writer.write(_sse(self.event(session, chunk))):
                    return produced
            if first_only:
                return produced
            index += 1

    def _count(self, session: Session, chunk: Chunk) -> None:
        """Account for a chunk that is answered (one stopped mid-way is never counted)."""
        decode_s = float(str(chunk.body["decode_latency_ms"])) / 1000
        vlm_s = float(str(chunk.body["vlm_latency_ms"])) / 1000
        with self._lock:
            self.times.decode_count += 1
            self.times.decode_sum_s += decode_s
            self.times.latest = {"decode": decode_s, "vlm": vlm_s, "vlm_pipeline": decode_s + vlm_s,
                                 "e2e": max(0.0, time.time() - chunk.stamped_unix)}
            session.prompt_tokens += int(str(chunk.body["input_tokens"]))
            session.completion_tokens += int(str(chunk.body["output_tokens"]))
            session.chunks += 1
            self.chunks_total += 1
            self.empty_chunks_total += 0 if chunk.body["frame_count"] else 1

    def event(self, session: Session, chunk: Chunk) -> dict[str, object]:
        """One SSE event in the shape the ``caption_shape`` knob selects."""
        if self.knobs.values.caption_shape == "wrapped":
            event = self._wrapper(session, chunk.media_info, [chunk.body])
        else:
            event = dict(chunk.body)
        if chunk.error:
            event["error"] = dict(EVENT_ERROR)
        return event

    def _wrapper(
        self, session: Session, media_info: dict[str, object], bodies: list[dict[str, object]]
    ) -> dict[str, object]:
        return {
            "id": session.request_id,
            "created": int(time.time()),
            "model": session.params.model,
            "media_info": media_info,
            "chunk_responses": bodies,
        }

    def usage_event(self, session: Session) -> dict[str, object]:
        """The closing usage event: it describes no chunk, so its ``media_info`` is not a
        ``timestamp`` one (the VSS harness reads ``end_timestamp`` from every ``timestamp``
        media_info it sees and would count the usage event as a latency sample, or fail on a
        timestamp one without it): the request's span as offsets in seconds."""
        span = int(time.time() - session.started_unix)
        wrapper = self._wrapper(session, {"type": "offset", "start_offset": 0,
                                          "end_offset": max(0, span)}, [])
        wrapper["usage"] = self.usage(session)
        return wrapper

    def completion(self, session: Session, chunks: list[Chunk]) -> dict[str, object]:
        """The non-streaming body (see the module docstring for the flat case)."""
        if self.knobs.values.caption_shape == "flat" and len(chunks) == 1:
            return self.event(session, chunks[0])
        wrapper = self._wrapper(
            session,
            _timestamps(session.started_unix, time.time()),
            [chunk.body for chunk in chunks],
        )
        wrapper["usage"] = self.usage(session)
        if any(chunk.error for chunk in chunks):
            wrapper["error"] = dict(EVENT_ERROR)
        return wrapper

    def usage(self, session: Session) -> dict[str, object]:
        with self._lock:
            return {
                "query_processing_time": int(time.time() - session.started_unix),
                "total_chunks_processed": session.chunks,
                "prompt_tokens": session.prompt_tokens,
                "completion_tokens": session.completion_tokens,
                "total_tokens": session.prompt_tokens + session.completion_tokens,
            }


def _sse(payload: object) -> bytes:
    return f"data: {validation.dumps(payload)}\n\n".encode()


def register(router: Router, service: CaptionService, store: FileStore) -> None:
    """Add this group's routes (``store``: uploaded files, captioned by ``filecaptions``)."""

    @router.route("POST", "/v1/generate_captions")
    def generate(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response(503)
        try:
            params = parse(request)
        except Invalid as exc:
            return validation.invalid_response(exc)
        if isinstance(params, Response):
            return params
        if filecaptions.names_files(params.stream_ids, service.streams, store):
            return filecaptions.answer(params.stream_ids, params.prompt, params.model,
                                       params.max_tokens, params.stream, store,
                                       service.streams, service.knobs)
        opened = service.open(params)
        if isinstance(opened, Response):
            return opened
        session = opened
        if not params.stream:
            try:
                chunks = service.run(session, None, first_only=True)
            finally:
                service.close(session)
            return Response.json(200, service.completion(session, chunks))

        def body(writer: StreamWriter) -> None:
            try:
                service.run(session, writer, first_only=False)
                if writer.alive():
                    if params.include_usage:
                        writer.write(_sse(service.usage_event(session)))
                    writer.write(b"data: [DONE]\n\n")
            finally:
                service.close(session)

        headers = (("X-Request-Id", session.request_id), ("Cache-Control", "no-cache"))
        return Response.streaming(SSE_CONTENT_TYPE, body, headers)

    @router.route("DELETE", "/v1/generate_captions/{stream_id}")
    def stop(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            stream_id = schema.uuid_param(request.params["stream_id"], "path.stream_id")
            request_ids = request.query.get("request_id")
            request_id = (
                schema.uuid_param(request_ids[-1], "query.request_id") if request_ids else None
            )
        except Invalid as exc:
            return validation.invalid_response(exc)
        return service.stop(stream_id, request_id)
