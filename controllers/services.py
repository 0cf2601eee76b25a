"""What every kind shares within one process: the store, the stop event, and each kind's parts.

A kind's process-wide state (the Host kind's live sessions, the StreamSet kind's caption
sessions, the Experiment kind's run board) is a ``Part`` of the kind's own, made on first use
and closed with the services: ``Hosts.of(services)``. The services know no kind, so a new kind
brings its state along without an edit here, and a kind that needs another's part imports it
from the kind it depends on (a Deployment asks ``Hosts`` for its Host's session).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Self, TypeVar

import structlog

from state.models import Owner
from state.store import Store

Progress = Callable[[str, str], None]
log = structlog.get_logger("controllers.services")


class Part:
    """A kind's state that outlives a pass. ``describe`` and ``calls`` feed the daemon's
    summary and its API-call metric; ``close`` runs once, when the services close."""

    @classmethod
    def made(cls, services: Services) -> Self:
        raise NotImplementedError

    @classmethod
    def of(cls, services: Services) -> Self:
        """This part of ``services``, made on first use."""
        return services.part(cls)

    def describe(self) -> dict[str, Any]:
        return {}

    def calls(self) -> Iterable[tuple[str, float]]:
        """(target, API calls so far) for the daemon's metrics."""
        return ()

    def stopping(self) -> None:
        """The process is shutting down: unblock background work (close event streams) so
        its threads end; the part itself stays usable until ``close``."""
        return None

    def close(self) -> None:
        return None


P = TypeVar("P", bound=Part)


class Services:
    def __init__(self, store: Store, instance: Owner, progress: Progress,
                 stop: threading.Event | None = None) -> None:
        self.store = store
        self.instance = instance
        self.progress = progress
        # Set when the process shuts down: every part's background work ends with it.
        self.stop = stop if stop is not None else threading.Event()
        self._parts: dict[type[Part], Part] = {}
        self._parts_lock = threading.RLock()  # a part made from another may ask for it
        self.http_calls: Counter[str] = Counter()  # RTVI/VST requests by call (metrics)
        self._calls_lock = threading.Lock()

    def part(self, cls: type[P]) -> P:
        with self._parts_lock:
            found = self._parts.get(cls)
            if found is None:
                found = self._parts[cls] = cls.made(self)
        assert isinstance(found, cls)
        return found

    def parts(self) -> list[Part]:
        with self._parts_lock:
            return list(self._parts.values())

    def count_call(self, what: str) -> None:
        """Count one RTVI or VST request (``what``: e.g. "list streams")."""
        with self._calls_lock:
            self.http_calls[what] += 1

    def close(self) -> None:
        """Close every part, the last made first (a run board before the sessions it uses)."""
        for part in reversed(self.parts()):
            try:
                part.close()
            except Exception:  # one part's failure must not leave the others open
                log.exception("part.close_failed", part=type(part).__name__)
