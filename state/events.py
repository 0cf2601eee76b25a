"""The append-only event log (``events.jsonl``).

Events are the long, human-readable tail of what happened ("created container rtvi-x because
image digest changed"); status files keep only a bounded history. One JSON object per line,
appended with fsync, so a crash can tear at most the last line. Readers skip lines that do not
parse instead of failing: a torn tail must never make ``reconciler status`` unusable.

Sequence numbers are assigned by the single writer (the process holding the state lock): the
next number is the largest one in the file plus one, scanned once and then tracked in memory.

The log rotates: when an append would take ``events.jsonl`` past ``max_bytes`` it becomes
``events.jsonl.1`` (``.1`` becomes ``.2`` ..., the oldest beyond ``keep`` is dropped) and a new
file starts. Readers read the files oldest first, so ``events`` and ``status`` see one log;
sequence numbers carry on across files. Limits: ``RECONCILER_EVENTS_MAX_BYTES`` (10 MiB) and
``RECONCILER_EVENTS_KEEP`` (5 rotated files).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
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

DEFAULT_POLL_S = 1.0
"""How often ``follow`` looks at the file even when no change was reported."""
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_KEEP = 5

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


def _max_seq(data: bytes) -> int:
    return max((e.seq for e in map(_parse, data.split(b"\n")) if e is not None), default=0)


def _env_int(name: str, default: int) -> int:
    """A positive integer from the environment, else ``default`` (a typo must not disable
    the limit)."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value >= 0 else default


def _matches(event: Event, resource: str | None, since_seq: int) -> bool:
    return event.seq > since_seq and (resource is None or event.resource == resource)


class Observed:
    """An event log whose appends are told to ``observers`` (the daemon's metrics count them
    by kind and reason: promotions, rejections, rollbacks), after the event is recorded."""

    def __init__(self) -> None:
        self.observers: list[Callable[[Event], None]] = []

    def told(self, event: Event) -> Event:
        for observe in self.observers:
            observe(event)
        return event


class EventLog(Observed):
    """Append and read ``events.jsonl``; appends are scrubbed by ``redactor`` and thread-safe."""

    def __init__(self, path: Path, redactor: Redactor, max_bytes: int | None = None,
                 keep: int | None = None) -> None:
        super().__init__()
        self.path = Path(path)
        self._redactor = redactor
        self._lock = threading.Lock()
        self._last_seq: int | None = None
        self._size = 0
        self.max_bytes = max_bytes if max_bytes is not None else _env_int(
            "RECONCILER_EVENTS_MAX_BYTES", DEFAULT_MAX_BYTES)
        self.keep = keep if keep is not None else _env_int("RECONCILER_EVENTS_KEEP",
                                                            DEFAULT_KEEP)

    def rotated(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def files(self) -> list[Path]:
        """The log's files, oldest first (rotated ones that exist, then the current one)."""
        old = [self.rotated(n) for n in range(self.keep, 0, -1)]
        return [p for p in old if os.path.lexists(p)] + [self.path]

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
                if self._size and self._size + len(line) + 1 > self.max_bytes:
                    self._rotate()
                append_line_durable(self.path, line)
            except OSError as exc:
                raise StateError(f"cannot append to event log {self.path}: "
                                 f"{os_reason(exc)}") from None
            self._size += len(line.encode("utf-8")) + 1
            self._last_seq = event.seq
        return self.told(event)

    def _rotate(self) -> None:
        """Shift ``.N`` to ``.N+1`` (dropping the oldest beyond ``keep``), the current file to
        ``.1``. Renames only: a reader holding a file keeps reading it whole."""
        if self.keep <= 0:
            os.unlink(self.path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.rotated(self.keep))
            for n in range(self.keep - 1, 0, -1):
                with contextlib.suppress(FileNotFoundError):
                    os.rename(self.rotated(n), self.rotated(n + 1))
            os.rename(self.path, self.rotated(1))
        fsync_dir(self.path.parent)
        self._size = 0

    def _recover(self) -> int:
        """Drop a torn last line left by a crash and return the largest sequence number.

        Without the cut, the next append would be glued onto the fragment and lost with it.
        """
        data = read_file(self.path)
        if data is None:
            return self._last_rotated_seq()
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
        self._size = len(data)
        return _max_seq(data) or self._last_rotated_seq()

    def _last_rotated_seq(self) -> int:
        """Just after a rotation the current file is empty: the numbers go on from ``.1``."""
        for path in reversed(self.files()[:-1]):
            data = read_file(path)
            if data and (last := _max_seq(data)):
                return last
        return 0

    def read(
        self, resource: str | None = None, since_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events with ``seq > since_seq`` (for ``resource`` if given), oldest first.

        With ``limit``, only the newest ``limit`` of those are returned (still oldest first), which
        is what a status display wants; to page forward, raise ``since_seq`` instead.
        """
        if limit is not None and limit <= 0:
            return []
        found: list[list[Event]] = []
        count = 0
        for path in reversed(self.files()):  # newest first: a limit reads only what it needs
            data = read_file(path)
            if data is None:
                continue
            events = [event for event in map(_parse, data.split(b"\n"))
                      if event is not None and _matches(event, resource, since_seq)]
            found.append(events)
            count += len(events)
            if limit is not None and count >= limit:
                break
        ordered = [event for events in reversed(found) for event in events]
        return ordered[-limit:] if limit is not None else ordered

    def follow(
        self, resource: str | None = None, since_seq: int = 0, poll_s: float = DEFAULT_POLL_S
    ) -> Generator[Event, None, None]:
        """Yield existing and then newly appended events, forever; stop by closing the generator.

        Only complete lines are consumed: a line still being written (or torn) is re-read at the
        next poll, so no event is yielded twice or half.
        """
        changes = self._changes(poll_s)
        with contextlib.closing(changes):
            yield from self._follow(changes, resource, since_seq)

    def _follow(self, changes: Iterator[object], resource: str | None,
                last: int) -> Generator[Event, None, None]:
        offset = 0
        inode: int | None = None
        while True:
            try:
                info = os.lstat(self.path)
                size, current = info.st_size, info.st_ino
            except FileNotFoundError:
                size, current = 0, None
            if inode is not None and (current != inode or size < offset):
                # Rotated (or replaced): what we missed is in the rotated files; the seq
                # filter drops what we already yielded.
                for old in self._rotated(resource, last):
                    last = old.seq
                    yield old
                offset = 0
            inode = current
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
                    continue  # more may already be there; look again before waiting
            next(changes)

    def _rotated(self, resource: str | None, last: int) -> Iterator[Event]:
        """The events after ``last`` (of ``resource``) in the rotated files, oldest first."""
        for path in self.files()[:-1]:
            for old in self._read_path(path):
                if _matches(old, resource, last):
                    last = old.seq
                    yield old

    def _changes(self, poll_s: float) -> Generator[object, None, None]:
        """Yields when the log's folder changes (an append, a rotation), and at least every
        ``poll_s``: a change the watch misses (a network filesystem) is seen then. Where the
        folder cannot be watched (no inotify left), it simply ticks every ``poll_s``."""
        with contextlib.suppress(OSError, RuntimeError):
            import watchfiles  # only a follower needs it (and it costs every CLI start)

            yield from watchfiles.watch(self.path.parent, recursive=False, debounce=50, step=5,
                                        rust_timeout=max(1, int(poll_s * 1000)),
                                        yield_on_timeout=True)  # Ctrl-C ends events -f
        while True:
            time.sleep(poll_s)
            yield None

    def _read_path(self, path: Path) -> list[Event]:
        data = read_file(path) or b""
        return [event for event in map(_parse, data.split(b"\n")) if event is not None]

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
