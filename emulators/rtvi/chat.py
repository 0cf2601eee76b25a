"""``POST /v1/chat/completions``: OpenAI-shaped answers from a stream's or a file's frames.

With ``id`` naming a registered stream, the answer describes the stream's latest decoded frame;
naming an uploaded file, its first frame (decoded by ffmpeg now, the file held "in use"
meanwhile). Without ``id`` the answer echoes the last user text -- there is no model to ask.
Nothing is invented: a stream without a decoded frame yet, or an undecodable file, is said so.

Choices where the real service is not published: ``image_url``/``video_url`` parts are accepted
and validated for shape but not fetched (tests must not leave loopback); ``stream: true`` gives
one ``chat.completion.chunk`` SSE event with the whole text, then ``data: [DONE]``; ``id`` may be
a string or a one-element list.
"""

from __future__ import annotations

import time
import uuid

from emulators.rtvi import colours, ingest, validation
from emulators.rtvi.captions import DECODE_KEYS
from emulators.rtvi.files import FileStore
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Request, Response, Router, StreamWriter
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import StreamTable, loading_response
from emulators.rtvi.validation import Invalid

CHAT_KEYS = (
    "model",
    "messages",
    "max_tokens",
    "min_tokens",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "ignore_eos",
    "id",
    *DECODE_KEYS,
    "response_format",
)
PART_TYPES = {"text": "text", "image_url": "image_url", "video_url": "video_url"}
ROLES = ("system", "user", "assistant")


def _last_user_text(messages: object) -> str:
    if not isinstance(messages, list) or not messages:
        raise Invalid("body.messages: expected a non-empty list")
    text = ""
    for index, message in enumerate(messages):
        where = f"body.messages[{index}]"
        if not isinstance(message, dict):
            raise Invalid(f"{where}: expected an object")
        validation.only_keys(message, ("role", "content", "name"), where)
        role = validation.require(message, "role", where)
        if role not in ROLES:
            raise Invalid(f"{where}.role: must be one of {ROLES}")
        content = validation.require(message, "content", where)
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list):
            raise Invalid(f"{where}.content: expected a string or a list of parts")
        for part_index, part in enumerate(parts):
            part_where = f"{where}.content[{part_index}]"
            if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
                raise Invalid(f"{part_where}: expected a text, image_url or video_url part")
            kind = str(part["type"])
            validation.only_keys(part, ("type", PART_TYPES[kind]), part_where)
            value = validation.require(part, PART_TYPES[kind], part_where)
            if kind == "text" and role == "user":
                text = validation.string(value, f"{part_where}.text")
    return text


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
            return Response.error(404, "NotFound", f"no stream or file {target}")
        try:
            frame = ingest.grab_file_frame(str(stored.path))
            time.sleep(knobs.vlm_latency_s(streams.live_count()))
        finally:
            store.release(stored)
        if frame is None:
            return "No frame could be decoded from the file."
        return f"The frame shows {colours.describe(frame)}."

    @router.route("POST", "/v1/chat/completions")
    def complete(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            body = validation.json_object(request)
            validation.only_keys(body, CHAT_KEYS)
            model = validation.string(validation.require(body, "model"), "body.model")
            text = _last_user_text(validation.require(body, "messages"))
            stream = validation.boolean(body.get("stream", False), "body.stream")
            if body.get("max_tokens") is not None:
                validation.integer(body["max_tokens"], "body.max_tokens", 1, 16384)
            target = body.get("id")
            if isinstance(target, list) and len(target) == 1:
                target = target[0]
            target_id = None if target is None else validation.uuid_text(target, "body.id")
        except Invalid as exc:
            return validation.invalid_response(exc)
        if target_id is None:
            content: str | Response = f"You said: {text}" if text else "Hello."
        else:
            content = answer_for(target_id)
        if isinstance(content, Response):
            return content
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        usage = {
            "prompt_tokens": len(text.split()),
            "completion_tokens": len(content.split()),
            "total_tokens": len(text.split()) + len(content.split()),
        }
        if not stream:
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
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": usage,
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
                    "finish_reason": "stop",
                    "delta": {"role": "assistant", "content": content},
                }
            ],
        }

        def body_writer(writer: StreamWriter) -> None:
            writer.write(f"data: {validation.dumps(event)}\n\n".encode())
            writer.write(b"data: [DONE]\n\n")

        return Response.streaming("text/event-stream", body_writer)
