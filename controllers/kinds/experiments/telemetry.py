"""A run's GPU telemetry: read once in Preflight, sampled while the run measures, read again
after cleanup, and kept as ``evidence/telemetry.json``.

Why a Preflight read: a run whose contract requires telemetry (``spec.telemetry.required``)
must fail before it starts anything, not after an hour without numbers. Optional telemetry
that cannot be read is recorded as "not measured (why)" at every point — never as a zero,
which a reader would take for an idle GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import Field

from controllers.kinds.host.gputelemetry import Sampler, Snapshot, Telemetry, TelemetryUnavailable
from specs.models import TelemetrySpec
from state.evidence import Document

EVIDENCE_FILE = "evidence/telemetry.json"
NO_SOURCE = "no telemetry source for this Host"


@dataclass
class RunTelemetry:
    source: Telemetry | None
    spec: TelemetrySpec
    start: Snapshot | None = None
    why_not: str = ""  # why ``start`` could not be read
    sampler: Sampler | None = None
    end: Snapshot | str | None = None

    @classmethod
    def preflight(cls, source: Telemetry | None, spec: TelemetrySpec) -> RunTelemetry:
        run = cls(source, spec)
        run.start, run.why_not = run._read()
        return run

    def _read(self) -> tuple[Snapshot | None, str]:
        if self.source is None:
            return None, NO_SOURCE
        try:
            return self.source.read(), ""
        except TelemetryUnavailable as exc:
            return None, str(exc)

    @property
    def source_name(self) -> str | None:
        return self.source.name if self.source is not None else None

    def memory_at_start(self) -> dict[str, int]:
        """Memory in use per GPU UUID as Preflight read it (the baseline, without reading the
        source again); TelemetryUnavailable with Preflight's reason when it could not."""
        if self.start is None:
            raise TelemetryUnavailable(self.why_not)
        return {g.uuid: g.memory_used_mib for g in self.start.gpus}

    def required_missing(self) -> str | None:
        """Why a run that requires telemetry cannot start (None: it can)."""
        if self.spec.required and self.start is None:
            return f"required GPU telemetry cannot be read: {self.why_not}"
        return None

    @contextlib.contextmanager
    def sampling(self, stop: threading.Event) -> Iterator[None]:
        """Sample every ``intervalSeconds`` while the run measures (when Preflight read it)."""
        if self.source is None or self.start is None:
            yield
            return
        with Sampler(self.source, self.spec.intervalSeconds, stop) as sampler:
            self.sampler = sampler
            yield

    def finish(self) -> None:
        """The reading after cleanup."""
        if self.start is not None:
            snapshot, why = self._read()
            self.end = snapshot if snapshot is not None else f"not measured ({why})"

    def evidence(self) -> TelemetryDocument:
        not_measured = f"not measured ({self.why_not})"
        window: dict[str, GpuWindowDoc] | str = not_measured
        failures: list[str] = []
        series: list[SeriesReading] = []  # every reading of the window: the plots' data
        if self.sampler is not None:
            failures = self.sampler.failures
            series = [SeriesReading(at=s.at, gpus={g.uuid: (g.memory_used_mib,
                                                            g.utilization_pct)
                                                   for g in s.gpus})
                      for s in self.sampler.snapshots]
            summary = self.sampler.window()
            window = ({uuid: GpuWindowDoc.model_validate(dataclasses.asdict(w))
                       for uuid, w in summary.items()} if summary
                      else "not measured (no reading succeeded during the run)")
        elif self.start is not None:
            window = "not measured (the run did not reach its measuring phase)"
        return TelemetryDocument(
            source=self.source_name, required=self.spec.required, dcgmUrl=self.spec.dcgmUrl,
            intervalSeconds=self.spec.intervalSeconds,
            start=_readings(self.start) if self.start is not None else not_measured,
            window=window, failures=failures, series=Series(readings=series),
            end=(_readings(self.end) if isinstance(self.end, Snapshot) else
                 self.end if self.end is not None else not_measured))


class GpuState(Document):
    index: int
    memoryUsedMiB: int
    memoryTotalMiB: int
    utilizationPct: float | None = None


class Readings(Document):
    """Every GPU of the Host at one moment (Preflight, or after cleanup)."""

    at: float
    gpus: dict[str, GpuState] = Field(default_factory=dict)


class GpuWindowDoc(Document):
    """One GPU over the measuring window (``gputelemetry.GpuWindow``)."""

    uuid: str
    samples: int
    memory_mean_mib: float
    memory_max_mib: int
    utilization_mean_pct: float | None = None


class SeriesReading(Document):
    at: float
    gpus: dict[str, tuple[int, float | None]] = Field(default_factory=dict)  # as ``fields``


class Series(Document):
    fields: list[str] = Field(default_factory=lambda: ["memoryUsedMiB", "utilizationPct"])
    readings: list[SeriesReading] = Field(default_factory=list)


class TelemetryDocument(Document):
    """``evidence/telemetry.json``: each point is its readings, or "not measured (why)"."""

    source: str | None = None
    required: bool = False
    dcgmUrl: str | None = None
    intervalSeconds: float = 1.0
    start: Readings | str = "not measured"
    window: dict[str, GpuWindowDoc] | str = "not measured"
    failures: list[str] = Field(default_factory=list)
    series: Series = Field(default_factory=Series)
    end: Readings | str = "not measured"


def _readings(snapshot: Snapshot) -> Readings:
    return Readings(at=snapshot.at, gpus={g.uuid: GpuState(
        index=g.index, memoryUsedMiB=g.memory_used_mib, memoryTotalMiB=g.memory_total_mib,
        utilizationPct=g.utilization_pct) for g in snapshot.gpus})
