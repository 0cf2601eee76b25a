"""The performance part's arithmetic: percentiles, dropped chunks and the ledger of units.

Pure on purpose: the numbers a canary publishes are only as good as this module, so it is
tested on its own. Percentiles are nearest-rank (no interpolation: every reported latency is one
that was measured). A dropped chunk is a gap in a stream's ``chunk_id`` sequence (IDs wrap at
the spec's maximum). Failed work counts what HTTP 200 hides: error fields, empty answers,
dropped chunks and streams that never answered (``rules.md``, performance contract).
"""

from __future__ import annotations

import datetime
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field

from controllers.kinds.streamset.caption_events import CaptionChunk
from specs.experiments.base import LatencySource
from state.evidence import Document

CHUNK_ID_WRAP = 100_000  # the spec's maximum chunk_id + 1
PERCENTILES = (50, 90, 95, 99)


def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


class LatencySummary(Document):
    """Chunk latency in ms: nearest-rank percentiles, how many were measured, the worst."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    count: int = 0
    max: float | None = None


def latency_summary(values: Sequence[float]) -> LatencySummary:
    return LatencySummary.model_validate({
        **{f"p{p}": percentile(values, p) for p in PERCENTILES}, "count": len(values),
        "max": max(values) if values else None})


def _step(before: int, after: int) -> int:
    return (after - before) % CHUNK_ID_WRAP


def dropped(ids: Sequence[int]) -> list[tuple[int, int]]:
    """(after, next) pairs where ``chunk_id`` skipped ahead: each a gap of dropped chunks."""
    return [(a, b) for a, b in itertools.pairwise(ids) if 1 < _step(a, b) <= CHUNK_ID_WRAP // 2]


def disordered(ids: Sequence[int]) -> list[tuple[int, int]]:
    """(after, next) pairs where ``chunk_id`` repeated or went back (not a drop: a restart or
    a reordering, failed work of its own)."""
    return [(a, b) for a, b in itertools.pairwise(ids)
            if _step(a, b) == 0 or _step(a, b) > CHUNK_ID_WRAP // 2]


def dropped_count(ids: Sequence[int]) -> int:
    return sum(_step(a, b) - 1 for a, b in dropped(ids))


def answered(chunk: CaptionChunk) -> bool:
    """A chunk that answered about frames it saw: what a latency is measured on."""
    return (chunk.frame_count or 0) > 0 and not chunk.error and bool(chunk.content.strip())


@dataclass
class UnitOutcome:
    """One offered unit (one stream in one repetition) and what became of it."""

    source: str
    repetition: int
    admitted: bool = False
    rejected: str = ""  # why it was refused (registration or caption request)
    timed_out: bool = False
    broken: str = ""  # the stream's connection failed after it was admitted
    chunks: list[CaptionChunk] = field(default_factory=list)
    cleaned_up: bool = False

    @property
    def answered(self) -> list[CaptionChunk]:
        return [c for c in self.chunks if answered(c)]

    def failures(self) -> list[str]:
        """Why this unit is failed work ([] when it completed)."""
        found = []
        if self.rejected:
            found.append(f"rejected: {self.rejected}")
        if self.timed_out and not self.chunks:
            found.append("timed out: no answer arrived")
        errors = [c.error for c in self.chunks if c.error]
        if errors:
            found.append(f"error inside a 200 answer ({len(errors)}x): {errors[0]}")
        empty = [c for c in self.chunks if not c.error and (c.frame_count or 0) > 0
                 and not c.content.strip()]
        if empty:
            found.append(f"empty answer ({len(empty)}x)")
        if self.broken:
            found.append(f"stream broke before its window ended: {self.broken}")
        ids = [c.chunk_id for c in self.chunks if c.chunk_id is not None]
        if len(ids) < len(self.chunks):
            found.append(f"{len(self.chunks) - len(ids)} chunk(s) without chunk_id: dropped "
                         "chunks cannot be counted")
        gaps = dropped(ids)
        if gaps:
            found.append(f"dropped chunks: {dropped_count(ids)} (chunk_id " + ", ".join(
                f"{a}→{b}" for a, b in gaps[:5]) + ")")
        if back := disordered(ids):
            found.append("chunk_id repeated or went back (" + ", ".join(
                f"{a}→{b}" for a, b in back[:5]) + ")")
        if self.admitted and not self.answered and not errors and not empty:
            found.append("no chunk with fresh frames (no data is not low latency)")
        return found


class Ledger(Document):
    """The units of load, counted: offered, admitted, at most active at once, and how each
    ended (``rules.md``: the ledger a performance number stands on)."""

    offered: int = 0
    admitted: int = 0
    active: int = 0  # the most units captioning at once
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    timed_out: int = 0
    cleaned_up: int = 0


def ledger_of(units: Sequence[UnitOutcome], active: int) -> Ledger:
    ledger = Ledger(offered=len(units), active=active)
    for unit in units:
        ledger.admitted += unit.admitted
        ledger.rejected += bool(unit.rejected)
        ledger.timed_out += unit.timed_out and not unit.chunks
        ledger.cleaned_up += unit.cleaned_up
        if unit.failures():
            ledger.failed += 1
        else:
            ledger.completed += 1
    return ledger


def chunk_latency(chunk: CaptionChunk, source: LatencySource) -> float | None:
    """The chunk's latency in ms as ``source`` measures it (None: the chunk lacks the field):
    ``ntp_timestamp`` is the VSS harness's receive time - ``media_info.end_timestamp`` (the
    chunk's last frame as the source stamped it), never negative; ``processing_latency`` is
    the server's own ``chunk_latency_ms``."""
    if source == "processing_latency":
        return chunk.chunk_latency_ms
    age = _stamp_age_s(chunk)
    return None if age is None else round(max(0.0, age) * 1000, 3)


def _stamp_age_s(chunk: CaptionChunk) -> float | None:
    """Receive time - ``end_timestamp`` in seconds, unclamped (None: no stamp)."""
    if chunk.end_timestamp is None or chunk.received_unix is None:
        return None
    try:
        stamped = datetime.datetime.fromisoformat(chunk.end_timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamped.tzinfo is None:
        stamped = stamped.replace(tzinfo=datetime.UTC)
    return chunk.received_unix - stamped.timestamp()


SOURCE_FIELD = {"ntp_timestamp": "media_info.end_timestamp",
                "processing_latency": "chunk_latency_ms"}


SKEW_TOLERANCE_S = 0.05  # a stamp this far after its receipt is a clock, not a fast service


def latency_gap(answered: int, missing: int, source: LatencySource,
                skewed: int = 0) -> str | None:
    """Why latency is not measured ("not measured (why)"), or None when it is. Some chunks
    without the field are counted (``latencyMissing``), not a reason to drop the others; a
    chunk stamped after it was received means the clocks disagree, and then no latency of
    that source can be trusted."""
    if not answered:
        return "no answered chunk: no latency to measure"
    if skewed:
        return (f"not measured: {skewed} of {answered} answered chunk(s) were stamped after "
                "they were received (the source's and the reconciler's clocks disagree: "
                "align them with NTP, or measure with latencySource: processing_latency)")
    if missing == answered:
        hint = (" (a real server fills it with request profiling on: "
                "ENABLE_REQUEST_PROFILING=true)" if source == "processing_latency" else "")
        return (f"not measured: none of {answered} answered chunk(s) carried "
                f"{SOURCE_FIELD[source]}{hint}")
    return None


class UnitSummary(Document):
    """One unit (a stream in one repetition) of a performance report."""

    source: str
    repetition: int
    chunks: int
    answered: int
    failures: list[str] = Field(default_factory=list)


class PerformanceReport(Document):
    """Everything a performance judgement stands on: a canary's ``performance.json``, the
    ``report`` of each capacity window."""

    ledger: Ledger
    latencySource: LatencySource
    latencyNotMeasured: str | None = None  # why latency is not measured (None: it is)
    latencyMissing: int = 0  # answered chunks without the latency's field
    chunkLatencyMs: LatencySummary = Field(default_factory=LatencySummary)
    droppedChunks: int = 0
    units: list[UnitSummary] = Field(default_factory=list)


def performance_report(units: Sequence[UnitOutcome], active: int,
                       source: LatencySource = "ntp_timestamp") -> PerformanceReport:
    """Everything the performance gate is judged on, as evidence (latency as ``source``
    measures it, and why not where it cannot)."""
    answered = [c for u in units for c in u.answered]
    measured = [chunk_latency(c, source) for c in answered]
    latencies = [ms for ms in measured if ms is not None]
    per_unit = [UnitSummary(source=u.source, repetition=u.repetition, chunks=len(u.chunks),
                            answered=len(u.answered), failures=u.failures()) for u in units]
    skewed = 0 if source != "ntp_timestamp" else sum(
        1 for c in answered if (age := _stamp_age_s(c)) is not None and age < -SKEW_TOLERANCE_S)
    return PerformanceReport(
        ledger=ledger_of(units, active), latencySource=source,
        latencyNotMeasured=latency_gap(len(answered), len(answered) - len(latencies), source,
                                       skewed),
        latencyMissing=len(answered) - len(latencies),
        chunkLatencyMs=latency_summary(latencies),
        droppedChunks=sum(dropped_count([c.chunk_id for c in u.chunks
                                         if c.chunk_id is not None]) for u in units),
        units=per_unit)
