"""Mutable state of one emulated RTVI service, shared by all request threads.

Why one object behind one lock: ``ThreadingHTTPServer`` runs each request on its own thread and
the lifecycle thread flips the phase concurrently; keeping every mutable field here (and nothing
mutable in handler modules) makes later endpoint groups (streams, captions, files) add their
tables to the same place and reason about one lock.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from emulators.rtvi.config import Settings

RequestKey = tuple[str, str, int]  # (method, route template, status)


class Phase(enum.Enum):
    """Where the simulated model load stands."""

    LOADING = "loading"  # listening, model not loaded yet: ready/startup/models answer 503
    READY = "ready"  # serving
    FAILED = "failed"  # a fatal fault happened while loading; never becomes ready


class Inventory(Protocol):
    """Counts of the asset tables (streams, captions, files) for metrics and asset stats."""

    def gauges(self) -> dict[str, float]:
        """Keys: streams, draining_streams, caption_requests, files, file_bytes, chunks_total,
        empty_chunks_total, decoded_frames_total, decoder_restarts_total, injected_faults_total."""


@dataclass
class ServiceState:
    """Everything mutable. Read through the accessors; they take the lock."""

    settings: Settings
    started_monotonic: float = field(default_factory=time.monotonic)
    created_unix: int = field(default_factory=lambda: int(time.time()))
    _phase: Phase = Phase.LOADING
    _requests: Counter[RequestKey] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    inventory: Inventory | None = None

    @property
    def phase(self) -> Phase:
        with self._lock:
            return self._phase

    def mark_ready(self) -> None:
        """Loading finished; a failed service stays failed."""
        with self._lock:
            if self._phase is Phase.LOADING:
                self._phase = Phase.READY

    def mark_failed(self) -> None:
        with self._lock:
            self._phase = Phase.FAILED

    def is_ready(self) -> bool:
        return self.phase is Phase.READY

    def uptime_s(self) -> float:
        return time.monotonic() - self.started_monotonic

    def count_request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self._requests[(method, route, status)] += 1

    def request_counts(self) -> dict[RequestKey, int]:
        with self._lock:
            return dict(self._requests)

    def gauges(self) -> dict[str, float]:
        return {} if self.inventory is None else self.inventory.gauges()

    def active_streams(self) -> int:
        """Registered streams, draining ones included (they are still listed)."""
        return int(self.gauges().get("streams", 0))
