"""What every source shares: the snapshot it loads, the error that refuses one, the protocol."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from controllers.waiting import until
from specs.errors import SpecIssue
from specs.validate import SpecSet

# How often a waiting watcher looks at the caller's stop event (it cannot wait on two events).
STOP_CHECK_S = 0.05



@dataclass(frozen=True)
class Snapshot:
    """One revision of desired state, validated as a whole.

    File names in ``spec_set`` (and in its issues) resolve against ``root``: ``root / file``
    is the file that was read. For a Git source ``root`` is the snapshot of the whole
    repository, even when only a folder of it was loaded, so names stay repository paths.
    """

    revision: str  # Git SHA, or "sha256:<hex>" digest of a folder's spec files
    spec_set: SpecSet
    root: Path  # folder the files were read from


class SourceError(Exception):
    """A revision that cannot be used; nothing of it is applied.

    ``str()`` lists every issue line (``file:line:col: field: message (rule)``) when there are
    issues, else the plain reason, so the daemon can show it as is.
    """

    def __init__(self, reason: str, issues: Sequence[SpecIssue] = (),
                 revision: str | None = None, reason_code: str = "InvalidRevision") -> None:
        self.reason = reason
        self.issues = list(issues)
        self.revision = revision
        self.reason_code = reason_code  # the Stalled condition's reason
        super().__init__("\n".join(str(i) for i in self.issues) if self.issues else reason)


class Source(Protocol):
    """Where specs come from. ``load`` and ``watch`` may run in different threads."""

    name: str

    def load(self) -> Snapshot:
        """Read the current revision and validate it; raise ``SourceError`` if it is unusable."""
        ...

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        """Block until ``stop`` is set, calling ``changed()`` whenever a new revision may exist."""
        ...

    def poke(self) -> None:
        """Ask the watcher to call ``changed()`` promptly ("look now")."""
        ...


class EitherEvent:
    """Looks set when any of its events is: watchfiles takes one stop event, we have two
    reasons to leave its loop (the caller stops us, or someone pokes)."""

    def __init__(self, *events: threading.Event) -> None:
        self._events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)


def wait_either(stop: threading.Event, wake: threading.Event, seconds: float) -> None:
    """Wait up to ``seconds`` or until either event is set (looked at every STOP_CHECK_S)."""
    until(lambda: True if stop.is_set() or wake.is_set() else None, timeout_s=seconds,
          pace=STOP_CHECK_S, stop=None)
