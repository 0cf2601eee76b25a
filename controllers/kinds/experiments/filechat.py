"""One chat completion about a pinned file: uploaded, asked about, deleted — shared by the
port validation's media rows and the benchmark's smoke request, which must both leave no file
behind and say so when one stays (in use, or refused)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controllers.clients.rtvi_client import ChatAnswer, RtviClient
from controllers.errors import ControllerError
from controllers.kinds.experiments.pinned import MediaError, read_pinned


@dataclass(frozen=True)
class PinnedFile:
    path: str
    sha256: str
    media_type: str  # "image" | "video"


@dataclass
class Asked:
    answer: ChatAnswer | None = None
    seconds: float | None = None  # how long the chat request took
    file_id: str | None = None
    problems: list[str] = field(default_factory=list)  # request failed; file left


def ask(client: RtviClient, body: dict[str, Any], timeout_s: float,
        media: PinnedFile | None = None) -> Asked:
    """Send ``body`` (with ``id`` set to the uploaded file when ``media`` is given); the file
    is deleted whatever happens, and a file the service keeps is a problem."""
    asked = Asked()
    try:
        if media is not None:
            data = read_pinned(media.path, media.sha256)
            asked.file_id = client.upload_file(Path(media.path).name, data, media.media_type)
            body = {**body, "id": asked.file_id}
        started = time.monotonic()
        asked.answer = client.chat(body, timeout_s)
        asked.seconds = time.monotonic() - started
    except (ControllerError, MediaError) as exc:
        asked.problems.append(f"request failed or hung: {exc}")
    finally:
        if asked.file_id is not None:
            try:
                client.delete_file(asked.file_id)
            except ControllerError as exc:
                asked.problems.append(f"file asset {asked.file_id} left (not deleted): {exc}")
    return asked
