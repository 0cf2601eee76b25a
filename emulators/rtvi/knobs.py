"""Knobs that tests may change while the emulator runs (``POST /emulator/knobs``).

Why separate from ``config.Settings``: settings are frozen at start-up; these are read on
every request, start from their environment knob, and can be changed at run time so a test can
prove "503 at capacity, then success after capacity was raised" against one process.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class KnobValues:
    max_streams: int | None  # None: unlimited
    latency_ms: float  # base per-chunk VLM latency
    latency_per_stream_ms: float  # added per active stream
    drain_s: float  # drain window of a stream delete
    caption_shape: str = "wrapped"  # "wrapped" | "flat": shape of caption events and bodies
    # A release before blocking deletes: ``blocking`` and ``drain_timeout_seconds`` are refused
    # with 422, and a delete answers at once while its streams drain in the background.
    legacy_delete: bool = False
    # Capacity experiments: above ``breach_above`` live streams every chunk takes ``breach_ms``
    # more (the latency breach a capacity search must find), and each chunk's time varies by up
    # to ``jitter_ms`` either way, as a real service's does.
    breach_above: int | None = None
    breach_ms: float = 0.0
    jitter_ms: float = 0.0
    answer_mode: str = "normal"  # how chat completions answer (``answers.shape``)
    evs_pruning_rate: float | None = None  # both EVS variables set: prompt tokens pruned
    file_hang_s: float = 0.0  # a chat request about a file hangs this long, the file in use
    decode_delay_s: float = 0.0  # a new stream's decoder starts this long after its add
    ingest_delay_s: float = 0.0  # frames reach the chunker this long after they arrive
    # Deleting a stream a caption request holds: "end" stops that request (its event stream
    # ends with [DONE]) and deletes; "refuse" answers 409 ResourceInUse.
    delete_in_use: str = "end"
    # An add whose every entry is refused at capacity: "503" answers HTTP 503 ServerBusy;
    # "in-200" reports each refusal inside a 200's errors[].
    capacity_refusal: str = "503"


class Knobs:
    """Thread-safe holder of :class:`KnobValues`."""

    def __init__(self, values: KnobValues, seed: int | None = None) -> None:
        self._values = values
        self._lock = threading.Lock()
        self._random = random.Random(seed)  # jitter; seeded for a reproducible run

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
        ms = values.latency_ms + values.latency_per_stream_ms * active_streams
        if values.breach_above is not None and active_streams > values.breach_above:
            ms += values.breach_ms
        if values.jitter_ms:
            ms += self._random.uniform(-values.jitter_ms, values.jitter_ms)
        return max(0.0, ms) / 1000.0
