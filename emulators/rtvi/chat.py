"""``POST /v1/chat/completions`` and ``POST /v1/completions``: OpenAI-shaped answers.

Chat: with ``id`` naming a registered stream, the answer describes the stream's latest decoded
frame; naming an uploaded file, its first frame (decoded by ffmpeg now, the file held "in use"
meanwhile). Without ``id`` the answer echoes the last user text -- there is no model to ask.
Nothing is invented: a stream without a decoded frame yet, or an undecodable file, is said so.
The body is the spec's ``ChatCompletionRequest`` (``CHAT_REQUEST``, strict); the spec gives the
answer no schema, so it is OpenAI's ``chat.completion`` (or ``chat.completion.chunk`` events).

Completions: the body is ``CompletionRequest``; the answer ``CompletionResponse`` echoes the
prompt (``"You said: ..."``), or with ``stream: true`` one SSE event of that shape, then
``data: [DONE]``.

Choices where the real service is not published: ``image_url``/``video_url`` parts are accepted
and validated for shape but not fetched (tests must not leave loopback); ``stream: true`` gives
one ``chat.completion.chunk`` SSE event with the whole text, then ``data: [DONE]``; with a list
of ``id`` the first one is described; an ``id`` that names no stream or file is 400
``InvalidParameter``. While the model loads, chat answers 503 (documented there) and completions
500 (no 503 documented).
"""

from __future__ import annotations

import math
import time
import uuid

from emulators.rtvi import answers, colours, ingest, schema, validation
from emulators.rtvi.files import FileStore
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router, StreamWriter
from emulators.rtvi.schema import (
    FREE_OBJECT,
    UUID,
    AnyOf,
    Array,
    Boolean,
    Enum,
    Integer,
    Number,
    Object,
    nullable,
    text,
)
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import StreamTable, loading_response
from emulators.rtvi.validation import Invalid

SSE_CONTENT_TYPE = "text/event-stream"
DEFAULT_COMPLETION_TOKENS = 16  # CompletionRequest.max_tokens default
TOKENS = Integer(1, 16384)
STOP = AnyOf((text(1000), Array(text(1000), 4)))
CONTENT_PART = Object(
    {
        "type": Enum(("text", "image_url", "video_url")),
        "text": nullable(text(100000)),
        "image_url": nullable(
            Object({"url": text(10_000_000), "detail": nullable(Enum(("auto", "low", "high")))},
                   required=("url",))
        ),
        "video_url": nullable(Object({"url": text(10_000_000)}, required=("url",))),
    },
    required=("type",),
)
CHAT_MESSAGE = Object(
    {
        "role": Enum(("system", "user", "assistant")),
        "content": AnyOf((text(1_000_000), Array(CONTENT_PART, 100))),
        "reasoning_description": nullable(text(1_000_000)),
    },
    required=("role", "content"),
)
# The spec's ChatCompletionRequest, field by field.
CHAT_REQUEST = Object(
    {
        "messages": Array(CHAT_MESSAGE, 100, 1),
        "model": text(256),
        "frequency_penalty": nullable(Number(-2, 2)),
        "logit_bias": nullable(Object({}, extra_values=Number())),
        "logprobs": nullable(Boolean()),
        "top_logprobs": nullable(Integer(0, 5)),
        "max_tokens": nullable(TOKENS),
        "n": nullable(Integer(1, 1)),
        "presence_penalty": nullable(Number(-2, 2)),
        "response_format": nullable(FREE_OBJECT),
        "seed": nullable(Integer(1, 4294967295)),
        "stop": STOP,
        "stream": nullable(Boolean()),
        "stream_options": nullable(FREE_OBJECT),
        "temperature": nullable(Number(0, 2)),
        "top_p": nullable(Number(0, 1)),
        "top_k": nullable(Integer(1, 1000)),
        "ignore_eos": nullable(Boolean()),
        "min_tokens": nullable(TOKENS),
        "max_completion_tokens": TOKENS,
        "media_io_kwargs": nullable(FREE_OBJECT),
        "mm_processor_kwargs": nullable(FREE_OBJECT),
        "id": AnyOf((UUID, Array(UUID, 100))),
        "chunk_duration": nullable(Integer(0, 3600)),
        "chunk_overlap_duration": nullable(Integer(-3600, 3600)),
        "enable_audio": nullable(Boolean()),
        "enable_reasoning": nullable(Boolean()),
        "num_frames_per_second_or_fixed_frames_chunk": nullable(Number(-1, 512)),
        "use_fps_for_chunking": nullable(Boolean()),
        "vlm_input_width": nullable(Integer(0, 4096)),
        "vlm_input_height": nullable(Integer(0, 4096)),
    },
    required=("messages", "model"),
)
# The spec's CompletionRequest.
COMPLETION_REQUEST = Object(
    {
        "prompt": AnyOf((text(100000), Array(text(100000), 100))),
        "model": text(256),
        "max_tokens": nullable(TOKENS),
        "temperature": nullable(Number(0, 2)),
        "top_p": nullable(Number(0, 1)),
        "top_k": nullable(Integer(1, 1000)),
        "n": nullable(Integer(1, 1)),
        "stream": nullable(Boolean()),
        "stop": STOP,
        "seed": nullable(Integer(1, 4294967295)),
    },
    required=("prompt", "model"),
)


def _last_user_text(messages: list[dict[str, object]]) -> str:
    found = ""
    for message in messages:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            found = content
            continue
        assert isinstance(content, list)
        for part in content:
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                found = str(part["text"])
    return found


def _usage(prompt: str, answer: str, pruning: float | None = None) -> dict[str, int]:
    prompt_tokens, completion_tokens = len(prompt.split()), len(answer.split())
    if pruning:  # EVS drops redundant video tokens before the model sees them
        prompt_tokens = math.ceil(prompt_tokens * (1 - pruning))
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _sse(*events: object) -> bytes:
    return b"".join(f"data: {validation.dumps(e)}\n\n".encode() for e in events)


def register(router: Router, streams: StreamTable, store: FileStore, knobs: Knobs) -> None:
    def answer_for(target: str) -> str | Response:
        stream = streams.get(target)
        if stream is not None:
            frame = stream.decoder.latest_frame()
            if frame is None:
                return "No frame has been decoded from the stream yet."
            return f"The frame shows {colours.describe(frame)}."
        stored = store.acquire(target)
        if stored is None:
            return Response.error(400, "InvalidParameter", "No such stream or file")
        try:
            frame = ingest.grab_file_frame(str(stored.path))
            time.sleep(knobs.vlm_latency_s(streams.live_count()) + knobs.values.file_hang_s)
        finally:
            store.release(stored)
        if frame is None:
            return "No frame could be decoded from the file."
        return f"The frame shows {colours.describe(frame)}."

    @router.route("POST", "/v1/chat/completions")
    def complete(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response(503)
        try:
            body = schema.json_body(validation.body_json(request), CHAT_REQUEST)
        except Invalid as exc:
            return validation.invalid_response(exc)
        model = str(body["model"])
        messages = body["messages"]
        assert isinstance(messages, list)
        said = _last_user_text(messages)
        target = body.get("id")
        if isinstance(target, list):
            target = target[0] if target else None
        if target is None:
            content: str | Response = f"You said: {said}" if said else "Hello."
        else:
            content = answer_for(str(uuid.UUID(str(target))))
        if isinstance(content, Response):
            return content
        content, finish = answers.shape(knobs.values.answer_mode, content)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if not body.get("stream"):
            return Response.json(
                200,
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": finish,
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": _usage(said, content, knobs.values.evs_pruning_rate),
                },
            )
        event = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish,
                    "delta": {"role": "assistant", "content": content},
                }
            ],
        }

        def body_writer(writer: StreamWriter) -> None:
            writer.write(_sse(event))
            writer.write(b"data: [DONE]\n\n")

        return Response.streaming(SSE_CONTENT_TYPE, body_writer)

    @router.route("POST", "/v1/completions")
    def text_completion(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            body = schema.json_body(validation.body_json(request), COMPLETION_REQUEST)
        except Invalid as exc:
            return validation.invalid_response(exc)
        prompt = body["prompt"]
        said = prompt if isinstance(prompt, str) else " ".join(str(p) for p in prompt)  # type: ignore[attr-defined]
        answer = f"You said: {said}" if said else "Hello."
        limit = body.get("max_tokens") or DEFAULT_COMPLETION_TOKENS
        finish = "stop"
        if isinstance(limit, int) and len(answer.split()) > limit:
            answer, finish = " ".join(answer.split()[:limit]), "length"
        response = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": str(body["model"]),
            "choices": [{"text": answer, "index": 0, "finish_reason": finish}],
            "usage": _usage(said, answer),
        }
        if not body.get("stream"):
            return Response.json(200, response)

        def body_writer(writer: StreamWriter) -> None:
            writer.write(_sse(response))
            writer.write(b"data: [DONE]\n\n")

        return Response.streaming(SSE_CONTENT_TYPE, body_writer)
