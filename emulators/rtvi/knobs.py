"""Knobs that tests may change while the emulator runs (``POST /emulator/knobs``).

Why separate from ``config.Settings``: settings are frozen at start-up; these are read on
every request, start from their environment knob, and can be changed at run time so a test can
prove "503 at capacity, then success after capacity was raised" against one process.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class KnobValues:
    max_streams: int | None  # None: unlimited
    latency_ms: float  # base per-chunk VLM latency
    latency_per_stream_ms: float  # added per active stream
    drain_s: float  # drain window of a stream delete
    caption_shape: str = "flat"  # "flat" | "wrapped": shape of caption events and bodies
    # A release before blocking deletes: ``blocking`` and ``drain_timeout_seconds`` are refused
    # with 422, and a delete answers at once while its streams drain in the background.
    legacy_delete: bool = False


class Knobs:
    """Thread-safe holder of :class:`KnobValues`."""

    def __init__(self, values: KnobValues) -> None:
        self._values = values
        self._lock = threading.Lock()

    @property
    def values(self) -> KnobValues:
        with self._lock:
            return self._values

    def update(self, **changes: object) -> KnobValues:
        with self._lock:
            merged = {**asdict(self._values), **changes}
            self._values = KnobValues(**merged)
            return self._values

    def vlm_latency_s(self, active_streams: int) -> float:
        values = self.values
        return (values.latency_ms + values.latency_per_stream_ms * active_streams) / 1000.0
