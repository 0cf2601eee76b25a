"""The append-only event log (``events.jsonl``).

Events are the long, human-readable tail of what happened ("created container rtvi-x because
image digest changed"); status files keep only a bounded history. One JSON object per line,
appended with fsync, so a crash can tear at most the last line. Readers skip lines that do not
parse instead of failing: a torn tail must never make ``reconciler status`` unusable.

Sequence numbers are assigned by the single writer (the process holding the state lock): the
next number is the largest one in the file plus one, scanned once and then tracked in memory.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from state.atomic import (
    DIR_MODE,
    READ_FLAGS,
    append_line_durable,
    ensure_dir,
    fsync_dir,
    open_private,
    os_reason,
    read_file,
    require_regular,
)
from state.errors import CorruptState, StateError
from state.models import Event, utc_now
from state.redaction import Redactor

DEFAULT_POLL_S = 0.2
"""How often ``follow`` checks the file for growth."""

EventType = Literal["Normal", "Warning"]


def _parse(line: bytes) -> Event | None:
    """One event from one line, or None for a torn, empty or foreign line."""
    line = line.strip()
    if not line:
        return None
    try:
        return Event.model_validate_json(line)
    except (ValidationError, ValueError):
        return None


def _matches(event: Event, resource: str | None, since_seq: int) -> bool:
    return event.seq > since_seq and (resource is None or event.resource == resource)


class EventLog:
    """Append and read ``events.jsonl``; appends are scrubbed by ``redactor`` and thread-safe."""

    def __init__(self, path: Path, redactor: Redactor) -> None:
        self.path = Path(path)
        self._redactor = redactor
        self._lock = threading.Lock()
        self._last_seq: int | None = None

    def append(self, resource: str, type: EventType, reason: str, message: str) -> Event:
        """Record one event durably and return it (as written, i.e. scrubbed)."""
        scrub = self._redactor.scrub_text
        with self._lock:
            if self._last_seq is None:
                ensure_dir(self.path.parent, DIR_MODE)
                self._last_seq = self._recover()
            event = Event(
                seq=self._last_seq + 1,
                time=utc_now(),
                resource=scrub(resource),
                type=type,
                reason=scrub(reason),
                message=scrub(message),
            )
            # model_dump_json escapes control characters, so the line holds no newline.
            line = event.model_dump_json()
            try:
                append_line_durable(self.path, line)
            except OSError as exc:
                raise StateError(f"cannot append to event log {self.path}: "
                                 f"{os_reason(exc)}") from None
            self._last_seq = event.seq
            return event

    def _recover(self) -> int:
        """Drop a torn last line left by a crash and return the largest sequence number.

        Without the cut, the next append would be glued onto the fragment and lost with it.
        """
        data = read_file(self.path)
        if data is None:
            return 0
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            # Through a descriptor opened without following links: a planted symlink is refused,
            # never the file it points to truncated.
            fd = open_private(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, keep)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.path.parent)
            data = data[:keep]
        last = 0
        for raw in data.split(b"\n"):
            event = _parse(raw)
            if event is not None and event.seq > last:
                last = event.seq
        return last

    def read(
        self, resource: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events with ``seq > since_seq`` (for ``resource`` if given), oldest first.

        With ``limit``, only the newest ``limit`` of those are returned (still oldest first), which
        is what a status display wants; to page forward, raise ``since_seq`` instead.
        """
        data = read_file(self.path)
        if data is None:
            return []
        events = [
            event
            for event in map(_parse, data.split(b"\n"))
            if event is not None and _matches(event, resource, since_seq)
        ]
        if limit is not None:
            events = events[-limit:] if limit > 0 else []
        return events

    def follow(
        self, resource: str | None = None, since_seq: int = 0, poll_s: float = DEFAULT_POLL_S
    ) -> Generator[Event, None, None]:
        """Yield existing and then newly appended events, forever; stop by closing the generator.

        Only complete lines are consumed: a line still being written (or torn) is re-read at the
        next poll, so no event is yielded twice or half.
        """
        offset = 0
        last = since_seq
        while True:
            try:
                size = os.lstat(self.path).st_size
            except FileNotFoundError:
                size = 0
            if size < offset:
                offset = 0  # truncated or replaced; the seq filter drops what we already saw
            if size > offset:
                chunk = self._read_from(offset, size - offset)
                complete = chunk.rfind(b"\n") + 1
                offset += complete
                for raw in chunk[:complete].split(b"\n"):
                    event = _parse(raw)
                    if event is not None and _matches(event, resource, last):
                        last = event.seq
                        yield event
                if complete:
                    continue  # more may already be there; poll again without sleeping
            time.sleep(poll_s)

    def _read_from(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``, opened without following a link (CorruptState)."""
        try:
            fd = os.open(self.path, READ_FLAGS)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise CorruptState(self.path, os_reason(exc)) from None
        require_regular(fd, self.path)
        try:
            return os.pread(fd, length, offset)
        finally:
            os.close(fd)
