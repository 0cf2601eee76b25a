"""Captions of uploaded files: ``POST /v1/generate_captions`` whose ``id`` names files.

The VSS harness's ``file_burst`` mode uploads a file (``POST /v1/files``) and asks for its
captions in one non-streaming request per file, many at once. The emulator answers one chunk per
file, describing the file's first decoded frame (decoded by ffmpeg now, the file held "in use"
meanwhile, as chat does), wrapped as the spec's ``VlmCaptionsCompletionResponse`` with an
``offset`` ``media_info``.

Choices where the real service is not published:

- One chunk per file whatever ``chunk_duration`` says: the emulator does not cut files.
- ``stream: true`` on files is 400 (the harness never asks it; live streams are what streams).
- ``input_tokens`` are counted as for live chunks (prompt words + ``TOKENS_PER_FRAME``), less the
  EVS pruning rate when both EVS variables are set, as chat counts them.
"""

from __future__ import annotations

import time
import uuid

from emulators.rtvi import colours, ingest
from emulators.rtvi.files import FileStore
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.routing import Response
from emulators.rtvi.streams import StreamTable

TOKENS_PER_FRAME = 196


def names_files(ids: list[str], streams: StreamTable, store: FileStore) -> bool:
    """Whether every ID names an uploaded file (and none a stream)."""
    return bool(ids) and all(streams.get(i) is None and store.get(i) is not None for i in ids)


def answer(ids: list[str], prompt: str, model: str, max_tokens: int, stream: bool,
           store: FileStore, streams: StreamTable, knobs: Knobs) -> Response:
    """The wrapped answer for files ``ids`` (one chunk each)."""
    if stream:
        return Response.error(400, "InvalidParameters",
                              "stream: true captions live streams; ask files without it")
    started = time.time()
    chunks: list[dict[str, object]] = []
    for index, file_id in enumerate(ids):
        stored = store.acquire(file_id)
        if stored is None:
            return Response.error(400, "InvalidParameter", "No such stream or file")
        begun = time.monotonic()
        try:
            frame = ingest.grab_file_frame(str(stored.path))
            decoded = time.monotonic()
            time.sleep(knobs.vlm_latency_s(streams.live_count()) + knobs.values.file_hang_s)
        finally:
            store.release(stored)
        answered = time.monotonic()
        content = ("No frame could be decoded from the file." if frame is None
                   else f"The frame shows {colours.describe(frame)}.")
        pruning = knobs.values.evs_pruning_rate or 0.0
        frame_tokens = round(TOKENS_PER_FRAME * (frame is not None) * (1 - pruning))
        chunks.append({
            "chunk_id": index, "start_time": "0", "end_time": "0", "content": content,
            "decode_latency_ms": round((decoded - begun) * 1000, 3),
            "vlm_latency_ms": round((answered - decoded) * 1000, 3),
            "chunk_latency_ms": round((answered - begun) * 1000, 3),
            "queue_time_s": 0.0, "processing_latency_s": round(answered - begun, 6),
            "frame_count": int(frame is not None),
            "input_tokens": len(prompt.split()) + frame_tokens,
            "output_tokens": min(len(content.split()), max_tokens)})
    prompt_tokens = sum(int(str(c["input_tokens"])) for c in chunks)
    completion_tokens = sum(int(str(c["output_tokens"])) for c in chunks)
    return Response.json(200, {
        "id": str(uuid.uuid4()), "created": int(started), "model": model,
        "media_info": {"type": "offset", "start_offset": 0, "end_offset": 0},
        "chunk_responses": chunks,
        "usage": {"query_processing_time": int(time.time() - started),
                  "total_chunks_processed": len(chunks), "prompt_tokens": prompt_tokens,
                  "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}})
