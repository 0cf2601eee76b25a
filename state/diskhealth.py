"""Whether the state directory takes writes: a full or read-only disk made visible, not fatal.

A daemon whose state disk filled up used to look healthy while it wrote nothing: status said
Ready from files it could no longer update, ``health`` exited 0, and logging the death of a
thread failed for lack of space, so the thread was never restarted. Every durable write of the
state directory (``state.atomic``) and every log line reports here; a write that fails for a
reason of the disk (no space, read-only, quota, I/O error) marks the directory failing until a
write succeeds again. The daemon's ``health`` fails and says why while it lasts, a metric
shows it, and once a probe write succeeds again the daemon resyncs everything (a save that
arrived meanwhile included), so it recovers by itself.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO})
PROBE_EVERY_S = 1.0  # also how soon the daemon says that writes began to fail, or returned
PROBE_FILE = ".write-probe"
"""Written (atomically) into the state directory while writes fail, to notice recovery."""


@dataclass(frozen=True)
class Failing:
    """Why writes fail, since when (epoch seconds), and how many failed since."""

    reason: str
    since: float
    failures: int


class WriteHealth:
    """The state directory's write health, process-wide (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.root: Path | None = None  # the state directory watched (None: every write)
        self._failing: Failing | None = None
        self._on_recover: list[Callable[[], None]] = []

    @property
    def failing(self) -> Failing | None:
        return self._failing

    def watches(self, path: Path) -> bool:
        """Whether a write to ``path`` speaks for the state directory (evidence written to
        another disk must neither mark it failing nor clear it)."""
        return self.root is None or path.is_relative_to(self.root)

    def failed(self, what: str, exc: OSError) -> None:
        """A write of ``what`` failed; only a disk's reasons mark the directory failing (a
        refused symlink or a missing folder is that file's problem, reported where it is)."""
        if exc.errno not in DISK_ERRNOS:
            return
        reason = f"{exc.strerror or exc} writing {what}"
        with self._lock:
            old = self._failing
            self._failing = Failing(reason, old.since if old else time.time(),
                                    (old.failures if old else 0) + 1)

    def succeeded(self) -> None:
        """A write succeeded: the disk takes writes again."""
        if self._failing is None:
            return
        with self._lock:
            recovered, self._failing = self._failing is not None, None
            callbacks = list(self._on_recover) if recovered else []
        for callback in callbacks:
            callback()

    def on_recover(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the writing thread) when writes succeed after failing;
        returns what forgets it again."""
        with self._lock:
            self._on_recover.append(callback)

        def forget() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._on_recover.remove(callback)
        return forget

    def probe(self, write: Callable[[], None]) -> None:
        """While failing, try ``write`` (a small durable write; the daemon calls this every
        ``PROBE_EVERY_S``): an idle daemon writes nothing else, and must still notice that
        the disk recovered."""
        if self._failing is None:
            return
        try:
            write()
        except OSError as exc:
            self.failed("a probe file", exc)
        else:
            self.succeeded()


WRITES = WriteHealth()
