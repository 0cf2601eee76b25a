"""Captions: ``POST /v1/generate_captions`` and ``DELETE /v1/generate_captions/{stream_id}``.

A caption request cuts each of its streams' timelines into chunks and, at the end of every chunk,
describes the frames that stream's decoder delivered during it. Nothing is invented: a chunk in
which no fresh frame arrived says so and reports ``frame_count`` 0.

Choices where the real service's behaviour is not published:

- ``chunk_duration`` 0 or absent means "no chunking" for files; a live stream must be cut
  somewhere, so it gets ``DEFAULT_LIVE_CHUNK_S`` (2 s). ``chunk_overlap_duration`` widens the frame
  window backwards; chunks still start every ``chunk_duration``.
- ``start_time``/``end_time`` are seconds since the request started (floats); ``media_info``
  carries wall-clock ISO-8601 UTC timestamps of the same window.
- Latencies are measured: ``decode_latency_ms`` is the time to select and analyse the chunk's
  frames, ``vlm_latency_ms`` the (really slept) simulated model time ``RTVI_EMU_LATENCY_MS +
  RTVI_EMU_LATENCY_PER_STREAM_MS * live streams``, ``queue_time_s`` the wait between chunk end and
  the start of its processing (streams of one request are processed in turn), and
  ``chunk_latency_ms``/``processing_latency_s`` chunk end to answer.
- Tokens: ``input_tokens`` = words of the prompt + ``TOKENS_PER_FRAME`` per frame; ``output_tokens``
  = words of the content (capped by ``max_tokens``).
- ``stream: true``: SSE, one ``data: {json}`` event per stream and chunk, kept open until the
  client disconnects or the request is stopped; then an optional usage event and ``data: [DONE]``.
  ``stream: false``: the answer comes after the first chunk of every stream, as one JSON object
  ``{"id", "object": "caption.completion", "model", "created", "chunks": [...], "choices": [...],
  "usage"}``.
- The request is "active" (its streams cannot be deleted) while its SSE connection lives.
- Several requests may caption one stream ("subscribers") when their decode settings match; a
  different setting gives 400 ``BadParameters``. ``DELETE .../{stream_id}`` stops the one
  request on that stream (all streams of it); with several and no ``request_id`` it answers 409.
- Capacity: 503 ``ServerBusy`` when live streams exceed ``max_streams`` or when the streams being
  captioned, with this request's, would.
- ``model`` must be a non-empty string; it is echoed, not checked against ``/v1/models``.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from emulators.rtvi import validation
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router, StreamWriter
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import StreamTable, loading_response
from emulators.rtvi.validation import Invalid

DEFAULT_LIVE_CHUNK_S = 2.0
MAX_IDS = 50
TOKENS_PER_FRAME = 196
WAIT_SLICE_S = 0.1  # how often a waiting request checks for stop and client disconnect
SSE_CONTENT_TYPE = "text/event-stream"
NO_FRAME_CONTENT = "No new frame was decoded from the stream during this chunk."
DECODE_KEYS = (
    "chunk_duration",
    "chunk_overlap_duration",
    "num_frames_per_second_or_fixed_frames_chunk",
    "use_fps_for_chunking",
    "vlm_input_width",
    "vlm_input_height",
)
CAPTION_KEYS = (
    "id",
    "prompt",
    "model",
    "stream",
    "stream_options",
    "max_tokens",
    "min_tokens",
    "ignore_eos",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "system_prompt",
    *DECODE_KEYS,
    "response_format",
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
    chunk_s: float
    overlap_s: float


@dataclass
class Session:
    """One active caption request."""

    params: CaptionParams
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: int = field(default_factory=lambda: int(time.time()))
    stop: threading.Event = field(default_factory=threading.Event)
    prompt_tokens: int = 0
    completion_tokens: int = 0


def parse(request: Request) -> CaptionParams:
    body = validation.json_object(request)
    validation.only_keys(body, CAPTION_KEYS)
    raw_ids = validation.require(body, "id")
    if isinstance(raw_ids, list):
        if not 1 <= len(raw_ids) <= MAX_IDS:
            raise Invalid(f"body.id: expected 1..{MAX_IDS} stream IDs")
        ids = [validation.uuid_text(item, f"body.id[{i}]") for i, item in enumerate(raw_ids)]
    else:
        ids = [validation.uuid_text(raw_ids, "body.id")]
    prompt = validation.string(validation.require(body, "prompt"), "body.prompt")
    model = validation.string(validation.require(body, "model"), "body.model")
    if not model:
        raise Invalid("body.model: must not be empty")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise Invalid("body.stream_options: expected an object")
    validation.only_keys(options, ("include_usage",), "body.stream_options")
    include_usage = validation.boolean(options.get("include_usage", False), "include_usage")
    _check_numbers(body)
    decode = tuple((key, body.get(key)) for key in DECODE_KEYS)
    chunk = float(body.get("chunk_duration") or 0)  # type: ignore[arg-type]
    overlap = float(body.get("chunk_overlap_duration") or 0)  # type: ignore[arg-type]
    chunk_s = chunk if chunk > 0 else DEFAULT_LIVE_CHUNK_S
    if overlap >= chunk_s:
        raise Invalid("body.chunk_overlap_duration: must be less than chunk_duration")
    return CaptionParams(
        ids,
        prompt,
        model,
        validation.boolean(body.get("stream", False), "body.stream"),
        include_usage,
        int(body.get("max_tokens") or 512),  # type: ignore[call-overload]
        decode,
        chunk_s,
        overlap,
    )


def _check_numbers(body: dict[str, object]) -> None:
    integers = {
        "max_tokens": (1, 16384),
        "min_tokens": (0, 16384),
        "seed": (0, 2**63 - 1),
        "top_k": (-1, 1000),
        "vlm_input_width": (0, 4096),
        "vlm_input_height": (0, 4096),
        "num_frames_per_second_or_fixed_frames_chunk": (0, 256),
    }
    numbers = {
        "temperature": (0.0, 1.0),
        "top_p": (0.0, 1.0),
        "chunk_duration": (0.0, 3600.0),
        "chunk_overlap_duration": (0.0, 3600.0),
    }
    for key, (low, high) in integers.items():
        if body.get(key) is not None:
            validation.integer(body[key], f"body.{key}", low, high)
    for key, (flow, fhigh) in numbers.items():
        if body.get(key) is not None:
            validation.number(body[key], f"body.{key}", flow, fhigh)
    for key in ("ignore_eos", "use_fps_for_chunking"):
        if body.get(key) is not None:
            validation.boolean(body[key], f"body.{key}")
    if body.get("system_prompt") is not None:
        validation.string(body["system_prompt"], "body.system_prompt")
    response_format = body.get("response_format")
    if response_format is not None:
        if not isinstance(response_format, dict):
            raise Invalid("body.response_format: expected an object")
        validation.only_keys(response_format, ("type",), "body.response_format")
        if response_format.get("type") not in ("text", "json_object"):
            raise Invalid("body.response_format.type: must be text or json_object")


def _iso(unix: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CaptionService:
    """Active caption requests, their chunk loop and counters."""

    def __init__(self, streams: StreamTable, knobs: Knobs) -> None:
        self._streams = streams
        self._knobs = knobs
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self.chunks_total = 0
        self.empty_chunks_total = 0
        streams.in_use = self.stream_in_use

    def stream_in_use(self, stream_id: str) -> bool:
        with self._lock:
            return any(stream_id in s.params.stream_ids for s in self._sessions.values())

    def active(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def open(self, params: CaptionParams) -> Session | Response:
        """Admit a request, or the error response that refuses it."""
        for stream_id in params.stream_ids:
            stream = self._streams.get(stream_id)
            if stream is None or stream.draining:
                return Response.error(404, "NotFound", f"stream {stream_id} not found")
        limit = self._knobs.values.max_streams
        live = self._streams.live_count()
        with self._lock:
            captioned = {i for s in self._sessions.values() for i in s.params.stream_ids}
            wanted = captioned | set(params.stream_ids)
            if limit is not None and (live > limit or len(wanted) > limit):
                return Response.error(
                    503, "ServerBusy", f"at capacity: {len(wanted)} streams over a limit of {limit}"
                )
            for other in self._sessions.values():
                shared = set(other.params.stream_ids) & set(params.stream_ids)
                if shared and other.params.decode != params.decode:
                    return Response.error(
                        400,
                        "BadParameters",
                        f"stream {sorted(shared)[0]} is captioned with other decode settings",
                    )
            session = Session(params)
            self._sessions[session.request_id] = session
        for stream_id in params.stream_ids:
            stream = self._streams.get(stream_id)
            if stream is not None:
                stream.chunk_duration = params.chunk_s
                stream.chunk_overlap_duration = params.overlap_s
        return session

    def close(self, session: Session) -> None:
        session.stop.set()
        with self._lock:
            self._sessions.pop(session.request_id, None)
            remaining = {i for s in self._sessions.values() for i in s.params.stream_ids}
        for stream_id in session.params.stream_ids:
            stream = self._streams.get(stream_id)
            if stream is not None and stream_id not in remaining:
                stream.chunk_duration = 0.0
                stream.chunk_overlap_duration = 0.0

    def stop(self, stream_id: str, request_id: str | None) -> Response:
        with self._lock:
            on_stream = [s for s in self._sessions.values() if stream_id in s.params.stream_ids]
        if request_id is not None:
            on_stream = [s for s in on_stream if s.request_id == request_id]
        if not on_stream:
            return Response.error(404, "NotFound", f"no caption request on stream {stream_id}")
        if len(on_stream) > 1:
            return Response.error(
                409, "MultipleSubscribers", "several caption requests: give request_id"
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
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            if session.stop.wait(min(remaining, WAIT_SLICE_S)):
                return False
            if writer is not None and not writer.alive():
                return False

    def chunk(
        self,
        session: Session,
        stream_id: str,
        index: int,
        window: tuple[float, float],
        origin: tuple[float, float],
    ) -> dict[str, object]:
        """Describe one stream's chunk ``index`` whose window ``[start, end)`` is monotonic."""
        start, end = window
        origin_mono, origin_unix = origin
        params = session.params
        begun = time.monotonic()
        stream = self._streams.get(stream_id)
        frames = (
            [] if stream is None else stream.decoder.frames_between(start - params.overlap_s, end)
        )
        tally = Counter(frame.description for frame in frames)
        decoded = time.monotonic()
        time.sleep(self._knobs.vlm_latency_s(self._streams.live_count()))
        answered = time.monotonic()
        content = NO_FRAME_CONTENT
        if frames:
            content = f"The frame shows {tally.most_common(1)[0][0]}."
        output_tokens = min(len(content.split()), params.max_tokens)
        input_tokens = len(params.prompt.split()) + TOKENS_PER_FRAME * len(frames)
        with self._lock:
            session.prompt_tokens += input_tokens
            session.completion_tokens += output_tokens
            self.chunks_total += 1
            self.empty_chunks_total += 0 if frames else 1
        return {
            "id": session.request_id,
            "object": "caption.chunk",
            "created": int(time.time()),
            "model": params.model,
            "stream_id": stream_id,
            "chunk_id": index,
            "start_time": round(start - origin_mono, 3),
            "end_time": round(end - origin_mono, 3),
            "content": content,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "decode_latency_ms": round((decoded - begun) * 1000, 3),
            "vlm_latency_ms": round((answered - decoded) * 1000, 3),
            "chunk_latency_ms": round((answered - end) * 1000, 3),
            "queue_time_s": round(max(0.0, begun - end), 6),
            "processing_latency_s": round(answered - end, 6),
            "frame_count": len(frames),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "media_info": {
                "type": "timestamp",
                "start_timestamp": _iso(origin_unix + (start - origin_mono)),
                "end_timestamp": _iso(origin_unix + (end - origin_mono)),
            },
        }

    def run(
        self,
        session: Session,
        writer: StreamWriter | None,
        first_only: bool,
    ) -> list[dict[str, object]]:
        """Produce chunks until stopped (or after the first set); SSE events go to ``writer``."""
        origin = (time.monotonic(), time.time())
        produced: list[dict[str, object]] = []
        index = 0
        while True:
            start = origin[0] + index * session.params.chunk_s
            end = start + session.params.chunk_s
            if not self.wait_until(session, end, writer):
                return produced
            for stream_id in session.params.stream_ids:
                event = self.chunk(session, stream_id, index, (start, end), origin)
                produced.append(event)
                if writer is not None and not writer.write(_sse(event)):
                    return produced
            if first_only:
                return produced
            index += 1

    def usage(self, session: Session) -> dict[str, int]:
        with self._lock:
            return {
                "prompt_tokens": session.prompt_tokens,
                "completion_tokens": session.completion_tokens,
                "total_tokens": session.prompt_tokens + session.completion_tokens,
            }


def _sse(payload: object) -> bytes:
    return f"data: {validation.dumps(payload)}\n\n".encode()


def register(router: Router, service: CaptionService) -> None:
    """Add this group's routes."""

    @router.route("POST", "/v1/generate_captions")
    def generate(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            params = parse(request)
        except Invalid as exc:
            return validation.invalid_response(exc)
        opened = service.open(params)
        if isinstance(opened, Response):
            return opened
        session = opened
        if not params.stream:
            try:
                chunks = service.run(session, None, first_only=True)
            finally:
                service.close(session)
            return Response.json(200, _completion(session, chunks, service.usage(session)))

        def body(writer: StreamWriter) -> None:
            try:
                service.run(session, writer, first_only=False)
                if writer.alive():
                    if params.include_usage:
                        writer.write(_sse(_usage_event(session, service.usage(session))))
                    writer.write(b"data: [DONE]\n\n")
            finally:
                service.close(session)

        headers = (("X-Request-Id", session.request_id), ("Cache-Control", "no-cache"))
        return Response.streaming(SSE_CONTENT_TYPE, body, headers)

    @router.route("DELETE", "/v1/generate_captions/{stream_id}")
    def stop(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        request_ids = request.query.get("request_id")
        stream_id = request.params["stream_id"]
        try:
            stream_id = str(uuid.UUID(stream_id))
        except ValueError:
            return Response.error(404, "NotFound", f"no caption request on stream {stream_id}")
        return service.stop(stream_id, request_ids[0] if request_ids else None)


def _usage_event(session: Session, usage: dict[str, int]) -> dict[str, object]:
    return {
        "id": session.request_id,
        "object": "caption.chunk",
        "created": int(time.time()),
        "model": session.params.model,
        "choices": [],
        "usage": usage,
    }


def _completion(
    session: Session, chunks: list[dict[str, object]], usage: dict[str, int]
) -> dict[str, object]:
    return {
        "id": session.request_id,
        "object": "caption.completion",
        "created": session.created,
        "model": session.params.model,
        "chunks": chunks,
        "choices": [
            {
                "index": i,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": chunk["content"]},
            }
            for i, chunk in enumerate(chunks)
        ],
        "usage": usage,
    }
