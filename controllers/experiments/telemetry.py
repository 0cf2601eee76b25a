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
from typing import Any

from controllers.host.gputelemetry import Sampler, Snapshot, Telemetry, TelemetryUnavailable
from specs.experiments.base import TelemetrySpec

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

    def evidence(self) -> dict[str, Any]:
        not_measured = f"not measured ({self.why_not})"
        window: dict[str, Any] | str = not_measured
        failures: list[str] = []
        series: list[dict[str, Any]] = []  # every reading of the window: the plots' data
        if self.sampler is not None:
            failures = self.sampler.failures
            series = [{"at": s.at, "gpus": {g.uuid: [g.memory_used_mib, g.utilization_pct]
                                            for g in s.gpus}} for s in self.sampler.snapshots]
            summary = self.sampler.window()
            window = ({uuid: dataclasses.asdict(w) for uuid, w in summary.items()} if summary
                      else "not measured (no reading succeeded during the run)")
        elif self.start is not None:
            window = "not measured (the run did not reach its measuring phase)"
        return {"source": self.source_name, "required": self.spec.required,
                "dcgmUrl": self.spec.dcgmUrl, "intervalSeconds": self.spec.intervalSeconds,
                "start": _readings(self.start) if self.start is not None else not_measured,
                "window": window, "failures": failures,
                "series": {"fields": ["memoryUsedMiB", "utilizationPct"], "readings": series},
                "end": (_readings(self.end) if isinstance(self.end, Snapshot) else
                        self.end if self.end is not None else not_measured)}


def _readings(snapshot: Snapshot) -> dict[str, Any]:
    return {"at": snapshot.at, "gpus": {g.uuid: {"index": g.index,
                                                 "memoryUsedMiB": g.memory_used_mib,
                                                 "memoryTotalMiB": g.memory_total_mib,
                                                 "utilizationPct": g.utilization_pct}
                                        for g in snapshot.gpus}}
