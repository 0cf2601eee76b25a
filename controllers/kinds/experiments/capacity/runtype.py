"""``type: capacity``: the search of ``capacity.py`` run on real stability windows.

A window at N streams: the first N numbered sources published (each its own publisher: a
distinct source identity; published once, kept for later windows), a fresh service (unless
``serviceReuse`` freezes reuse), N fresh streams captioned together for ``windowSeconds``, a
blocking delete proven against the listing, then the service's residue proven zero (streams,
files, active requests) before it is retired with its log kept. Its verdict:

- INCONCLUSIVE: a stream that failed while others did not (an error inside an answer, an
  empty answer, a broken connection, chunk IDs out of order: a fault of that stream, not load;
  every stream failing alike is load), residue that cannot
  be proven gone, the run's GPU memory not back at its Preflight baseline once the window's
  fresh service is gone (the next service would inherit the leak), a service that does not
  start or dies, the smoke request failing — the
  search stops, its ledger kept (BCD 3.3: "stop as inconclusive if one stream fails");
- UNSTABLE: what load does — streams refused admission, timed out or starved of fresh
  answers so that fewer than
  ``minSuccessRate`` completed, a dropped chunk, or p95 chunk latency above
  ``maxP95LatencyMs`` (or no answered chunk to measure);
- STABLE otherwise.

Evidence: ``evidence/capacity/<attempt>/wNN-<count>.json`` per window (with its captions
beside it), the ledger and boundary in ``evidence/capacity.json``, and the gate
``capacity-boundary``, passed only when the highest stable and first unstable counts are
adjacent. Child attempts after a failed first window (``<runId>.r<n>``) write under their own
attempt folder; the original failure stays first in the ledger.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from controllers.errors import ControllerError
from controllers.kinds.experiments import plots
from controllers.kinds.experiments.benchmark.runtype import GATE_HARNESS, GATE_SCENARIO
from controllers.kinds.experiments.capacity import harness as capacityharness
from controllers.kinds.experiments.capacity.documents import (
    CAPACITY_FILE,
    CapacityDocument,
    Criteria,
    LedgerRow,
    Seed,
    WindowDetail,
    WindowDocument,
    WindowRow,
)
from controllers.kinds.experiments.capacity.harness import GATE_BOUNDARY
from controllers.kinds.experiments.capacity.search import SearchSpec, Verdict, Window, search
from controllers.kinds.experiments.cleanup import CleanupReport, service_residue
from controllers.kinds.experiments.driver import (
    FRESHNESS_S,
    GATE_SMOKE,
    Measured,
    from_first_frame,
)
from controllers.kinds.experiments.ledger import (
    LatencySummary,
    PerformanceReport,
    performance_report,
)
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.reportparts import Section, cell, latency_point
from controllers.kinds.experiments.runtype import PlannedStep, RunContext, StartsWhenLaunched
from controllers.kinds.experiments.service import RunService
from controllers.kinds.experiments.streams import CanarySource, numbered_sources
from specs.experiments.base import LatencySource
from specs.experiments.capacity import CapacityExperimentSpec, CapacitySpec
from state.evidence import Evidence
from state.evidence import Verdict as RunVerdict

# How ledger.UnitOutcome.failures() words what load does to a stream; anything else it says
# is a fault of that stream.
# A stream starved of fresh answers in the window is load too: seen on a loaded 2-core machine,
# where 3 of 10 streams over the breach had no answered chunk in a 5 s window.
LOAD_SIGNS = ("rejected:", "timed out:", "dropped chunks:", "no chunk with fresh frames")
GPU_SETTLE_S = 20.0  # a released model frees its memory as its process ends; a leak never does


def judge(measured: Measured, cap: CapacitySpec, residue: CleanupReport,
          source: LatencySource = "ntp_timestamp") -> tuple[Verdict, str, PerformanceReport]:
    """A window's verdict, why, and its report (the performance ledger of its units, latency
    as ``source`` measures it; answers without its field leave the window INCONCLUSIVE)."""
    report = performance_report(measured.units, measured.peak, source)
    left = sorted(set(measured.left) | set(residue.evidence.streamsLeft or []))
    if left or residue.problems:
        why = residue.problems or [f"stream(s) not deleted: {', '.join(left)}"]
        return Verdict.INCONCLUSIVE, "zero residue not proven: " + "; ".join(why), report
    faulty = {u.source: why for u in measured.units for why in u.failures()
              if not why.startswith(LOAD_SIGNS)}
    if faulty and len(faulty) < len(measured.units):  # every stream failing: that is load
        faults = [f"{source}: {why}" for source, why in faulty.items()]
        return (Verdict.INCONCLUSIVE, "a stream failed (a fault, not a capacity signal): "
                + "; ".join(faults[:3]), report)
    ledger, p95 = report.ledger, report.chunkLatencyMs.p95
    offered = max(1, ledger.offered)
    rate = ledger.completed / offered
    problems = []
    if rate < cap.minSuccessRate:
        failed = [f"{u.source}: {u.failures()[0]}" for u in measured.units if u.failures()]
        problems.append(f"{ledger.completed}/{ledger.offered} streams completed "
                        f"(minimum {cap.minSuccessRate:.0%}): " + "; ".join(failed[:3]))
    if report.droppedChunks:
        problems.append(f"{report.droppedChunks} dropped chunk(s)")
    gap = report.latencyNotMeasured
    unmeasured = bool(rate) and gap is not None  # answers came, without the latency's field
    if unmeasured and not problems:
        return (Verdict.INCONCLUSIVE, f"p95 chunk latency {gap}: the window cannot be judged "
                "against maxP95LatencyMs", report)
    if p95 is None and not unmeasured:
        problems.append("no answered chunk: no latency to judge (no data is not low latency)")
    elif p95 is not None and p95 > cap.maxP95LatencyMs:
        problems.append(f"p95 chunk latency {p95:g} ms is above {cap.maxP95LatencyMs:g} ms")
    if problems:
        return Verdict.UNSTABLE, "; ".join(problems), report
    return (Verdict.STABLE, f"{ledger.completed}/{ledger.offered} streams completed, p95 "
            f"{p95:g} ms, 0 dropped chunks", report)


@dataclass
class Windows:
    """The WindowRunner the search calls: one real stability window per call."""

    ctx: RunContext[CapacityExperimentSpec]
    cap: CapacitySpec
    sources: list[CanarySource]
    service: RunService | None = None  # kept between windows only under serviceReuse
    smoked: bool = False
    files: list[str] = field(default_factory=list)  # each window's evidence file, in order

    def __call__(self, attempt: str, count: int) -> Window:
        number = len(self.files) + 1
        base = f"evidence/capacity/{attempt}/w{number:02d}-{count}"
        self.files.append(base + ".json")
        self.ctx.progress(f"window {number} ({attempt}): {count} stream(s) for "
                          f"{self.cap.windowSeconds}s " + from_first_frame(FRESHNESS_S))
        try:
            window, detail = self._window(attempt, number, count, base)
        except ControllerError as exc:  # a fatal runtime gate: the search cannot go on
            window = Window(count, Verdict.INCONCLUSIVE, None,
                            f"fatal: {type(exc).__name__}: {exc}", attempt)
            detail = WindowDetail()
        if self.service is not None and not self.cap.serviceReuse:
            try:
                self._retire(f"{attempt}-w{number:02d}")
            except ControllerError as exc:  # a service that stays is residue
                window = Window(count, Verdict.INCONCLUSIVE, window.p95_ms, f"{window.reason}"
                                f"; the window's service could not be retired: {exc}", attempt)
            else:
                window, detail.gpuMemory = self._gpu_back(window)
        self.ctx.evidence.write(base + ".json", WindowDocument(
            **dict(WindowRow.of(window)), windowSeconds=self.cap.windowSeconds,
            **dict(detail)))
        return window

    def _window(self, attempt: str, number: int, count: int,
                base: str) -> tuple[Window, WindowDetail]:
        cap, ctx = self.cap, self.ctx
        chosen = self.sources[:count]
        urls = ctx.publish(chosen, cap.publisher)
        if self.service is None:
            self.service = ctx.start_service()
        drv = ctx.driver(self.service, chosen, urls, cap.maxTokens, cap.chunkDurationSeconds)
        if not self.smoked and ctx.spec.smokes():
            self.smoked = True
            if not drv.smoke():
                reason = ctx.evidence.gates()[GATE_SMOKE].reason
                return Window(count, Verdict.INCONCLUSIVE, None, f"smoke failed: {reason}",
                              attempt), WindowDetail()
        names = [s.name for s in chosen]
        started = time.monotonic()
        measured = drv.window(f"{attempt}/w{number}", names, float(cap.windowSeconds), 0,
                              base + "-captions.jsonl")
        residue = CleanupReport()
        service_residue(residue, drv.make_client, list(measured.left), time.monotonic()
                        + drv.delete_s, ctx.stop)
        verdict, reason, report = judge(measured, cap, residue,
                                        ctx.spec.measurement.latencySource)
        p95 = report.chunkLatencyMs.p95
        return Window(count, verdict, p95, reason, attempt), WindowDetail(
            seconds=round(time.monotonic() - started, 3),
            freshWaitSeconds=measured.fresh_wait_s,
            sources={s.name: urls[s.name] for s in chosen},
            residue=residue.evidence, report=report, captions=base + "-captions.jsonl")

    def _gpu_back(self, window: Window) -> tuple[Window, dict[str, int] | str]:
        """The run's GPU memory back at its Preflight baseline once the window's service is
        gone (the next window's fresh service must not inherit a leak): else the window
        cannot vouch for the next one, and is INCONCLUSIVE naming the GPUs."""
        after, over = self.ctx.gpu_back(GPU_SETTLE_S)
        if over:
            window = Window(window.streams, Verdict.INCONCLUSIVE, window.p95_ms,
                            f"{window.reason}; GPU memory not back at its baseline after the "
                            f"window: {'; '.join(over)}", window.attempt)
        return window, after

    def _retire(self, name: str) -> None:
        service, self.service = self.service, None
        assert service is not None
        self.ctx.retire_service(service, name)

    def close(self) -> None:
        """The reused service, retired after the last window (its log kept)."""
        if self.service is not None:
            self._retire("service")


class CapacityType(StartsWhenLaunched):
    """``type: capacity``: maximum live streams, found in few stability windows."""

    name = "capacity"

    def declared_gates(self, spec: CapacityExperimentSpec) -> list[str]:
        smoke = [GATE_SMOKE] if spec.smokes() else []
        if spec.capacity.harness is not None:
            return [GATE_SCENARIO, *smoke, GATE_HARNESS, GATE_BOUNDARY]
        return [*smoke, GATE_BOUNDARY]

    def local_only(self, spec: CapacityExperimentSpec) -> bool:
        return spec.capacity.harness is not None and spec.executor != "host"

    def planned(self, spec: CapacityExperimentSpec) -> list[PlannedStep]:
        cap = spec.capacity
        if cap.harness is not None:
            return [PlannedStep("search", f"harness scenario {cap.harness.scenario}",
                                f"max_live_streams from {cap.initialStreamCount} "
                                f"(+{cap.addStreamCount}), its own windows and threshold: "
                                f"{' '.join(cap.harness.harness.argv)} in "
                                f"{cap.harness.harness.workdir}")]
        fresh = ("one service for every window (serviceReuse)" if cap.serviceReuse
                 else "a fresh service per window")
        return [PlannedStep("publish", f"up to {cap.maxStreamCount} source(s)", "one "
                            "publisher per stream (distinct source identities), as windows "
                            "need them"),
                PlannedStep("search", f"{cap.initialStreamCount}..{cap.maxStreamCount} "
                            "stream(s)", f"from {cap.initialStreamCount} (+{cap.addStreamCount}"
                            f"), {cap.windowSeconds}s windows, p95 <= {cap.maxP95LatencyMs:g} "
                            f"ms, success >= {cap.minSuccessRate:.0%}; {fresh}")]

    def execute(self, ctx: RunContext[CapacityExperimentSpec]) -> tuple[RunVerdict, str]:
        cap = ctx.spec.capacity
        if cap.harness is not None:
            return capacityharness.search(ctx, cap)
        windows = Windows(ctx, cap, numbered_sources(cap.maxStreamCount))
        try:
            outcome = search(windows, ctx.spec.runId, SearchSpec(
                cap.initialStreamCount, cap.addStreamCount, cap.maxStreamCount,
                cap.maxP95LatencyMs))
        finally:
            windows.close()
        result: RunVerdict
        if outcome.found:  # the boundary is the news: the verdict says it
            result = "PASS"
            reason = (f"highest stable {outcome.highest_stable}, first unstable "
                      f"{outcome.first_unstable} stream(s), in {len(outcome.ledger)} window(s)")
        elif outcome.inconclusive:
            result = "INCONCLUSIVE"
            reason = f"search stopped: {outcome.inconclusive}"
        else:
            result = "INCONCLUSIVE"
            reason = (f"stable at {outcome.highest_stable} stream(s), the most "
                      "maxStreamCount allows: the first unstable count is above it")
        attempts = list(dict.fromkeys(w.attempt for w in outcome.ledger))
        ctx.evidence.write(CAPACITY_FILE, CapacityDocument(
            highestStable=outcome.highest_stable, firstUnstable=outcome.first_unstable,
            found=outcome.found, inconclusive=outcome.inconclusive or None,
            criteria=Criteria(windowSeconds=cap.windowSeconds,
                              maxP95LatencyMs=cap.maxP95LatencyMs,
                              minSuccessRate=cap.minSuccessRate, droppedChunks=0, residue=0,
                              serviceReuse=cap.serviceReuse),
            seed=Seed(initialStreamCount=cap.initialStreamCount,
                      addStreamCount=cap.addStreamCount, maxStreamCount=cap.maxStreamCount),
            attempts=attempts, windowsUsed=len(outcome.ledger),
            ledger=[LedgerRow(**dict(WindowRow.of(w)), file=f)
                    for w, f in zip(outcome.ledger, windows.files, strict=True)]))
        ctx.evidence.gate(GATE_BOUNDARY, outcome.found, reason, {
            "file": CAPACITY_FILE, "highestStable": outcome.highest_stable,
            "firstUnstable": outcome.first_unstable, "windows": len(outcome.ledger),
            "attempts": attempts})
        return result, reason

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        """The boundary, every window of the ledger, latency by live streams."""
        capacity = evidence.read(CAPACITY_FILE, CapacityDocument)
        if capacity is None:
            return Section()
        if capacity.searchedBy == "harness":
            return _harness_section(evidence, capacity)
        points = [latency_point(w.streams, _window_latency(evidence, w.file), w.verdict)
                  for w in capacity.ledger]
        lines = ["## Capacity", "",
                 f"Highest stable: **{capacity.highestStable}**, first unstable: "
                 f"**{capacity.firstUnstable}** live streams, in "
                 f"{capacity.windowsUsed} stability window(s) "
                 f"(attempts: {', '.join(capacity.attempts)}).", "",
                 "| # | attempt | streams | verdict | p95 (ms) | reason |",
                 "|---|---|---|---|---|---|"]
        lines += [f"| {i} | {w.attempt} | {w.streams} | {w.verdict} | "
                  f"{w.p95_ms if w.p95_ms is not None else '-'} | "
                  f"{cell(w.reason)} |" for i, w in enumerate(capacity.ledger, 1)]
        png = plots.latency_by_streams(
            points, f"{evidence.folder.name}: chunk latency by live streams",
            capacity.criteria.maxP95LatencyMs,
            (capacity.highestStable, capacity.firstUnstable))
        return Section(lines, png)


def _window_latency(evidence: Evidence, file: str | None) -> LatencySummary | None:
    """A window's latency, from its own file (a file that cannot be read: a gap)."""
    window = evidence.read(file, WindowDocument) if file else None
    return window.report.chunkLatencyMs if window is not None and window.report else None


def _harness_section(evidence: Evidence, capacity: CapacityDocument) -> Section:
    """A search the harness ran: its boundary and the windows it logged."""
    rows = capacity.windows
    scenario = capacity.harness.scenario if capacity.harness is not None else None
    lines = ["## Capacity", "",
             f"Searched by the VSS harness (scenario {cell(scenario)}): highest stable "
             f"**{capacity.highestStable}**, first unstable "
             f"**{capacity.firstUnstable}** live streams.", "",
             "| # | streams | verdict | p95 (ms) |", "|---|---|---|---|"]
    lines += [f"| {i} | {w.streams} | {w.verdict} | "
              f"{w.p95_ms if w.p95_ms is not None else '-'} |"
              for i, w in enumerate(rows, 1)]
    points = [latency_point(w.streams, LatencySummary(p95=w.p95_ms), w.verdict) for w in rows]
    png = plots.latency_by_streams(
        points, f"{evidence.folder.name}: chunk latency by live streams (the harness's search)",
        None, (capacity.highestStable, capacity.firstUnstable))
    return Section(lines, png)
