"""Files: ``POST /v1/files`` (multipart), ``GET /v1/files[/{id}]``, ``DELETE /v1/files/{id}``.

Uploads are kept on disk under ``RTVI_EMU_FILES_DIR`` (default: a fresh temporary folder) so
chat requests can decode them with ffmpeg. Choices where the real service is not published:

- The record is OpenAI-shaped: ``{"id", "object": "file", "bytes", "created_at", "filename",
  "purpose", "media_type"}``; the list is ``{"object": "list", "data": [...]}``; a delete answers
  ``{"id", "object": "file", "deleted": true}``.
- ``purpose`` must be ``vision`` and ``media_type`` ``video`` or ``image`` (422 otherwise).
- "In use" means a chat completion is reading the file right now: 409 ``ResourceInUse``.
- Files are forgotten (and their folder emptied) when the process ends, like streams.
"""

from __future__ import annotations

import email.parser
import email.policy
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import loading_response

PURPOSES = ("vision",)
MEDIA_TYPES = ("video", "image")
FORM_FIELDS = ("purpose", "media_type", "file")


@dataclass
class StoredFile:
    id: str
    path: Path
    size: int
    created_at: int
    filename: str
    purpose: str
    media_type: str
    users: int = 0

    def record(self) -> dict[str, object]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.size,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "media_type": self.media_type,
        }


class FileStore:
    def __init__(self, directory: str | None) -> None:
        self._owned = directory is None
        self._dir = Path(directory or tempfile.mkdtemp(prefix="rtvi-emu-files-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._files: dict[str, StoredFile] = {}

    def count_and_bytes(self) -> tuple[int, int]:
        with self._lock:
            return len(self._files), sum(f.size for f in self._files.values())

    def add(self, filename: str, purpose: str, media_type: str, data: bytes) -> StoredFile:
        file_id = str(uuid.uuid4())
        path = self._dir / file_id
        path.write_bytes(data)
        stored = StoredFile(
            file_id, path, len(data), int(time.time()), filename, purpose, media_type
        )
        with self._lock:
            self._files[file_id] = stored
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        with self._lock:
            return self._files.get(file_id)

    def listing(self) -> list[StoredFile]:
        with self._lock:
            return list(self._files.values())

    def acquire(self, file_id: str) -> StoredFile | None:
        with self._lock:
            stored = self._files.get(file_id)
            if stored is not None:
                stored.users += 1
            return stored

    def release(self, stored: StoredFile) -> None:
        with self._lock:
            stored.users -= 1

    def delete(self, file_id: str) -> Response:
        with self._lock:
            stored = self._files.get(file_id)
            if stored is None:
                return Response.error(404, "NotFound", f"file {file_id} not found")
            if stored.users:
                return Response.error(409, "ResourceInUse", f"file {file_id} is in use")
            del self._files[file_id]
        stored.path.unlink(missing_ok=True)
        return Response.json(200, {"id": file_id, "object": "file", "deleted": True})

    def shutdown(self) -> None:
        if self._owned:
            shutil.rmtree(self._dir, ignore_errors=True)


def parse_multipart(request: Request) -> dict[str, tuple[str | None, bytes]] | str:
    """Form fields as ``{name: (filename, bytes)}``, or an error message."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        return "expected multipart/form-data"
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.body)
    if not message.is_multipart():
        return "malformed multipart body"
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            return "a form part has no name"
        payload = part.get_payload(decode=True)
        fields[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return fields


def register(router: Router, store: FileStore) -> None:
    @router.route("POST", "/v1/files")
    def upload(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        fields = parse_multipart(request)
        if isinstance(fields, str):
            return Response.error(422, "ValidationError", fields)
        unknown = sorted(set(fields) - set(FORM_FIELDS))
        if unknown:
            return Response.error(422, "ValidationError", f"unknown form fields: {unknown}")
        missing = [name for name in FORM_FIELDS if name not in fields]
        if missing:
            return Response.error(422, "ValidationError", f"missing form fields: {missing}")
        purpose = fields["purpose"][1].decode("utf-8", "replace")
        media_type = fields["media_type"][1].decode("utf-8", "replace")
        if purpose not in PURPOSES:
            return Response.error(422, "ValidationError", f"purpose must be one of {PURPOSES}")
        if media_type not in MEDIA_TYPES:
            return Response.error(
                422, "ValidationError", f"media_type must be one of {MEDIA_TYPES}"
            )
        filename, data = fields["file"]
        stored = store.add(filename or "upload", purpose, media_type, data)
        return Response.json(200, stored.record())

    @router.route("GET", "/v1/files")
    def listing(state: ServiceState, _request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        return Response.json(200, {"object": "list", "data": [f.record() for f in store.listing()]})

    @router.route("GET", "/v1/files/{file_id}")
    def one(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        stored = store.get(request.params["file_id"])
        if stored is None:
            return Response.error(404, "NotFound", f"file {request.params['file_id']} not found")
        return Response.json(200, stored.record())

    @router.route("DELETE", "/v1/files/{file_id}")
    def delete(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        return store.delete(request.params["file_id"])
