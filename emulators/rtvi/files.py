"""Files: ``POST /v1/files`` (multipart), ``GET /v1/files``, ``GET|DELETE /v1/files/{id}``,
``GET /v1/files/{id}/content``.

Uploads are kept on disk under ``RTVI_EMU_FILES_DIR`` (default: a fresh temporary folder) so
chat requests can decode them with ffmpeg. The form is the spec's
``Body_add_video_file_v1_files_post``: ``purpose`` (``vision``) and ``media_type`` (``video`` |
``image``) required; ``file``, ``filename``, ``url``, ``creation_time``, ``id``, ``sensor_name``
optional, each checked against its schema (422). That body schema does not forbid other form
fields, so they are ignored. Answers: ``AddFileInfoResponse`` (upload and list items),
``FileInfo`` (one file), ``DeleteFileResponse``.

Choices where the real service is not published:

- ``url`` is checked against the spec's pattern verbatim. As published that pattern is double
  escaped (``()\\\\[\\\\]@``): the character class closes early, so only URLs ending in the
  literal text ``@!$'*; ]`` match and every ordinary URL is refused with 422. The emulator
  follows the spec rather than guessing the intent.
- Neither ``file`` nor ``url``: a ``filename`` that is an absolute path is read from the
  service's own filesystem (what the VSS harness sends: no bytes, the path of a file on a
  volume the service shares), when it is a regular file of at most 512 MiB; otherwise 400
  ``BadParameters``. The emulator is a test stand-in: it reads what its process can. A ``url``
  is fetched only when it is ``file://`` (tests never leave the machine); ``http(s)://`` and
  ``s3://`` answer 400. ``file`` wins when both are given.
- The recorded ``filename`` is the form's ``filename``, else the upload's, else the URL's last
  segment, reduced to what ``AddFileInfoResponse.filename`` allows (``[A-Za-z0-9_.- ]``, other
  characters become ``_``).
- A caller-chosen ``id`` that exists already: 400 ``BadParameters``.
- ``GET /v1/files`` requires ``?purpose=`` (422 without it) and lists that purpose's files.
- ``/content`` answers the stored bytes as ``application/octet-stream``.
- Unknown file IDs: 400 ``InvalidParameter`` (the spec documents no 404); malformed ones 422.
  "In use" means a chat completion is reading the file right now: 409 ``ResourceInUse``.
- While the model loads: 500 ``ServiceUnavailable``.
- Files are forgotten (and their folder emptied) when the process ends, like streams.
"""

from __future__ import annotations

import email.parser
import email.policy
import re
import shutil
import tempfile
import threading
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from emulators.rtvi import schema, validation
from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.schema import TIMESTAMP, UUID, Enum, Schema, Text, text
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import loading_response
from emulators.rtvi.validation import Invalid

CONTENT_TYPE = "application/octet-stream"
URLENCODED = "application/x-www-form-urlencoded"
URL_PATTERN = r"^(https?://|file://|s3://)[A-Za-z0-9_.\-/:%?#&=+~,()\\[\\]@!$'*; ]+$"
# The text fields of Body_add_video_file_v1_files_post (``file`` is the binary part).
FORM_FIELDS: dict[str, Schema] = {
    "purpose": Enum(("vision",)),
    "media_type": Enum(("video", "image")),
    "filename": Text(256, r"^[A-Za-z0-9_.\-/ ]*$"),
    # Verbatim from the spec, double escaping included: as published it only matches URLs that
    # end in the literal text "@!$'*; ]" (see the module docstring).
    "url": Text(2048, URL_PATTERN),
    "creation_time": TIMESTAMP,
    "id": UUID,
    "sensor_name": text(256),
}
REQUIRED_FIELDS = ("purpose", "media_type")
PURPOSE_QUERY = Text(36, r"^[a-zA-Z]*$")
_FILENAME_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.\- ]")
MAX_FILENAME = 256
MAX_NAMED_FILE_BYTES = 512 * 1024 * 1024  # a file named by path: what one upload may be


@dataclass
class StoredFile:
    id: str
    path: Path
    size: int
    filename: str
    purpose: str
    media_type: str
    creation_time: str | None
    sensor_name: str
    users: int = 0

    def info(self) -> dict[str, object]:
        """The spec's ``FileInfo``."""
        return {
            "id": self.id,
            "bytes": self.size,
            "filename": self.filename,
            "creation_time": self.creation_time,
            "purpose": self.purpose,
            "sensor_name": self.sensor_name,
        }

    def record(self) -> dict[str, object]:
        """The spec's ``AddFileInfoResponse``."""
        return {**self.info(), "media_type": self.media_type}


@dataclass(frozen=True)
class NewFile:
    id: str | None
    filename: str
    purpose: str
    media_type: str
    creation_time: str | None
    sensor_name: str
    data: bytes


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

    def add(self, new: NewFile) -> StoredFile | None:
        """The stored file; None when its caller-chosen ID exists already."""
        file_id = new.id or str(uuid.uuid4())
        path = self._dir / file_id
        with self._lock:
            if file_id in self._files:
                return None
            stored = StoredFile(
                file_id,
                path,
                len(new.data),
                new.filename,
                new.purpose,
                new.media_type,
                new.creation_time,
                new.sensor_name,
            )
            self._files[file_id] = stored
            path.write_bytes(new.data)
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
                return no_such_file()
            if stored.users:
                return Response.error(409, "ResourceInUse", "The file is in use")
            del self._files[file_id]
        stored.path.unlink(missing_ok=True)
        return Response.json(200, {"id": file_id, "object": "file", "deleted": True})

    def shutdown(self) -> None:
        if self._owned:
            shutil.rmtree(self._dir, ignore_errors=True)


def no_such_file() -> Response:
    return Response.error(400, "InvalidParameter", "No such file")


def parse_multipart(request: Request) -> dict[str, tuple[str | None, bytes]] | str:
    """Form fields as ``{name: (filename, bytes)}``, or an error message. A URL-encoded form is
    read too (Starlette reads both for ``Form`` fields); it cannot carry a file."""
    content_type = request.headers.get("content-type", "")
    if content_type.lower().startswith(URLENCODED):
        pairs = urllib.parse.parse_qsl(request.body.decode("utf-8", "replace"))
        return {name: (None, value.encode()) for name, value in pairs}
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


def _clean_filename(raw: str) -> str:
    base = raw.replace("\\", "/").rsplit("/", 1)[-1]
    return _FILENAME_NOT_ALLOWED.sub("_", base)[:MAX_FILENAME] or "upload"


def _content(fields: dict[str, tuple[str | None, bytes]], values: dict[str, str]
             ) -> tuple[bytes, str] | Response:
    """The file's bytes and a fallback name: uploaded, fetched from ``url``, or read from a
    path on the service's own filesystem; a 400 when none can be had."""
    upload = fields.get("file")
    url = values.get("url")
    if upload is not None:
        return upload[1], upload[0] or "upload"
    if url is not None:
        fetched = _fetch(url)
        if isinstance(fetched, Response):
            return fetched
        return fetched, urllib.parse.urlsplit(url).path
    if values.get("filename", "").startswith("/"):
        # The VSS harness sends only a path on the service's own filesystem (a shared volume).
        named = Path(values["filename"])
        try:  # a regular file of a bounded size: never a FIFO, a device or /dev/zero
            if not named.is_file() or named.stat().st_size > MAX_NAMED_FILE_BYTES:
                raise OSError("not a regular file of at most the size limit")
            return named.read_bytes(), values["filename"]
        except OSError:
            return Response.error(400, "BadParameters", "The file named by filename cannot "
                                  "be read by the service")
    return Response.error(400, "BadParameters", "Either file, url or the path of a file the "
                          "service can read (filename) is required")


def parse_upload(request: Request) -> NewFile | Response:
    """The upload, a 400 for a schema-valid form the emulator cannot serve; raises Invalid."""
    fields = parse_multipart(request)
    if isinstance(fields, str):
        raise Invalid(f"body: {fields}")
    values: dict[str, str] = {}
    for name, check in FORM_FIELDS.items():
        if name in fields:
            value = fields[name][1].decode("utf-8", "replace")
            check.check(value, f"body.{name}")
            values[name] = value
    for name in REQUIRED_FIELDS:
        if name not in values:
            raise Invalid(f"body.{name}: field required")
    content = _content(fields, values)
    if isinstance(content, Response):
        return content
    data, fallback = content
    return NewFile(
        values.get("id"),
        _clean_filename(values.get("filename") or fallback),
        values["purpose"],
        values["media_type"],
        values.get("creation_time"),
        values.get("sensor_name", ""),
        data,
    )


def _fetch(url: str) -> bytes | Response:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        return Response.error(
            400, "BadParameters", "Only file URLs can be fetched by the emulator"
        )
    try:
        return Path(urllib.request.url2pathname(parts.path)).read_bytes()
    except OSError:
        return Response.error(400, "BadParameters", "The file URL cannot be read")


def register(router: Router, store: FileStore) -> None:
    @router.route("POST", "/v1/files")
    def upload(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            new = parse_upload(request)
        except Invalid as exc:
            return validation.invalid_response(exc)
        if isinstance(new, Response):
            return new
        stored = store.add(new)
        if stored is None:
            return Response.error(400, "BadParameters", "A file with this id exists already")
        return Response.json(200, stored.record())

    @router.route("GET", "/v1/files")
    def listing(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        try:
            given = request.query.get("purpose")
            if not given:
                raise Invalid("query.purpose: field required")
            PURPOSE_QUERY.check(given[-1], "query.purpose")
        except Invalid as exc:
            return validation.invalid_response(exc)
        data = [f.record() for f in store.listing() if f.purpose == given[-1]]
        return Response.json(200, {"object": "list", "data": data})

    def _stored(request: Request) -> StoredFile | Response:
        try:
            file_id = schema.uuid_param(request.params["file_id"], "path.file_id")
        except Invalid as exc:
            return validation.invalid_response(exc)
        stored = store.get(file_id)
        return no_such_file() if stored is None else stored

    @router.route("GET", "/v1/files/{file_id}")
    def one(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        stored = _stored(request)
        return stored if isinstance(stored, Response) else Response.json(200, stored.info())

    @router.route("GET", "/v1/files/{file_id}/content")
    def content(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        stored = _stored(request)
        if isinstance(stored, Response):
            return stored
        try:
            data = stored.path.read_bytes()
        except OSError:
            return no_such_file()  # deleted meanwhile
        return Response(200, data, CONTENT_TYPE)

    @router.route("DELETE", "/v1/files/{file_id}")
    def delete(state: ServiceState, request: Request) -> Response:
        if not state.is_ready():
            return loading_response()
        stored = _stored(request)
        return stored if isinstance(stored, Response) else store.delete(stored.id)
