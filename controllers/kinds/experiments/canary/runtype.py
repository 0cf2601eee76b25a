"""The canary executor (``rules.md``, canary): semantic isolation first, then performance.

1. **Semantic isolation** (2+ streams): one stream registered per source; every caption request
   started together, bound to its own stream ID, all asking the same forced-choice question;
   each source must give ``answersPerSource`` source-correct answers (``isolation``). The
   mapping and every caption are kept in ``evidence/semantic-isolation.json``. The probe streams
   are then deleted in one blocking batch and proven gone before anything else happens.
2. **Performance** (unless ``qualificationOnly``): per repetition (after warm-up runs), fresh
   streams for every source, captioned together for ``performanceSeconds``; per-chunk latency
   p50/p90/p95/p99, dropped chunks, and the ledger of offered, admitted, active, completed,
   failed, rejected, timed-out and cleaned-up units (``ledger``). Failed work includes what an
   HTTP 200 hides: error fields, empty answers, dropped chunks, streams with no fresh frames.

Every gate is written with its evidence as soon as it is judged; a gate that fails ends the
canary (the run's cleanup still runs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import Field

from controllers.kinds.experiments import isolation, plots
from controllers.kinds.experiments.driver import GATE_SMOKE, LoadDriver, from_first_frame, refusal
from controllers.kinds.experiments.ledger import PerformanceReport, UnitOutcome, performance_report
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.reportparts import Section, latency_point
from controllers.kinds.experiments.runtype import PlannedStep, RunContext, StartsWhenLaunched
from controllers.kinds.experiments.streams import canary_sources
from controllers.kinds.streamset.caption_events import CaptionChunk
from specs.experiments.canary import CanaryExperimentSpec
from state.evidence import Document, Evidence, Verdict

GATE_ISOLATION = "semantic-isolation"
GATE_PROBES_GONE = "probe-streams-deleted"
GATE_PERFORMANCE = "performance"
ISOLATION_FILE = "evidence/semantic-isolation.json"
PERFORMANCE_FILE = "evidence/performance.json"


def declared_gates(spec: CanaryExperimentSpec) -> list[str]:
    """The gates a PASS of this canary needs (cleanup is the run's own, added by the run)."""
    canary = spec.canary
    gates = [GATE_ISOLATION, GATE_PROBES_GONE] if canary.semanticIsolation else []
    gates += [GATE_SMOKE] if spec.smokes() else []
    return gates + ([] if canary.qualificationOnly else [GATE_PERFORMANCE])


class CanaryType(StartsWhenLaunched):
    """``type: canary``: one service for the whole run, its sources published once."""

    name = "canary"

    def local_only(self, spec: CanaryExperimentSpec) -> bool:
        return False

    def declared_gates(self, spec: CanaryExperimentSpec) -> list[str]:
        return declared_gates(spec)

    def planned(self, spec: CanaryExperimentSpec) -> list[PlannedStep]:
        canary = spec.canary
        return [PlannedStep("publish", f"{canary.streams} source(s)", "canary sources: "
                            + ", ".join(s.label for s in canary_sources(canary))),
                PlannedStep("register", f"{spec.largest_level()} stream(s) at a time",
                            "one per source, deleted and proven gone after each part")]

    def execute(self, ctx: RunContext[CanaryExperimentSpec]) -> tuple[Verdict, str]:
        canary = ctx.spec.canary
        service = ctx.start_service()
        sources = canary_sources(canary)
        urls = ctx.publish(sources, canary.publisher)
        driver = ctx.driver(service, sources, urls, canary.maxTokens,
                            canary.chunkDurationSeconds)
        run = CanaryRun(ctx.spec, driver)
        if run.execute():
            return "PASS", ""
        failed = {n: g.reason for n, g in ctx.evidence.gates().items() if not g.passed}
        if run.latency_unjudged and list(failed) == [GATE_PERFORMANCE]:
            # latency could not be measured and nothing else failed: not a FAIL of the service
            return "INCONCLUSIVE", f"{GATE_PERFORMANCE}: {failed[GATE_PERFORMANCE]}"
        return "FAIL", "; ".join(f"{n}: {r}" for n, r in failed.items()) or "a gate failed"

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        """Latency at the canary's stream count, and its ledger of units."""
        performance = evidence.read(PERFORMANCE_FILE, CanaryPerformance)
        if performance is None:
            return Section()
        spec = CanaryExperimentSpec.model_validate(manifest.spec)
        streams = spec.canary.streams
        latency, ledger = performance.chunkLatencyMs, performance.ledger.model_dump()
        lines = ["## Performance", "",
                 f"{streams} live stream(s): p50 {latency.p50} ms, p95 {latency.p95} ms, p99 "
                 f"{latency.p99} ms; dropped chunks {performance.droppedChunks}.", "",
                 "| " + " | ".join(ledger) + " |", "|" + "---|" * len(ledger),
                 "| " + " | ".join(str(v) for v in ledger.values()) + " |"]
        png = plots.latency_by_streams(
            [latency_point(streams, latency)],
            f"{evidence.folder.name}: chunk latency at {streams} live streams",
            spec.canary.maxP95LatencyMs)
        return Section(lines, png)


class ProbeStream(Document):
    """Which stream stood for which source, and what a correct answer names."""

    source: str
    label: str
    streamId: str
    url: str


class IsolationVerdict(Document):
    source: str
    label: str
    answers: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    passed: bool = False


class IsolationDocument(Document):
    """``evidence/semantic-isolation.json``: the question, the mapping, every caption each
    probe stream gave (as the service sent it) and each source's verdict."""

    prompt: str
    answersPerSource: int
    mapping: list[ProbeStream] = Field(default_factory=list)
    captions: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    verdicts: list[IsolationVerdict] = Field(default_factory=list)


class CanaryPerformance(PerformanceReport):
    """``evidence/performance.json``: the report the performance gate judged, what failed it,
    and how long each repetition waited for fresh frames."""

    problems: list[str] = Field(default_factory=list)
    freshWaitSeconds: list[float] = Field(default_factory=list)


@dataclass
class CanaryRun:
    spec: CanaryExperimentSpec
    driver: LoadDriver
    _probe_ids: list[str] = field(default_factory=list)
    latency_unjudged: bool = False  # maxP95LatencyMs set, latency not measured, nothing else

    def execute(self) -> bool:
        """Run the canary; True when every gate it judged passed."""
        canary = self.spec.canary
        if canary.semanticIsolation and not (self._isolation() and self._probes_gone()):
            return False
        if canary.qualificationOnly:
            return True
        if self.spec.smokes() and not self.driver.smoke():
            return False
        return self._performance()

    # --- semantic isolation ----------------------------------------------------------------

    def _isolation(self) -> bool:
        canary, drv = self.spec.canary, self.driver
        labels = {s.name: s.label for s in drv.sources}
        ids = {s.name: drv.stream_id("probe", s.name) for s in drv.sources}
        prompt = isolation.forced_choice_prompt(list(labels.values()))
        drv.progress(f"semantic isolation: {len(ids)} probe streams, "
                     f"{canary.answersPerSource} answers each")
        refused = drv.register(ids, labels)
        needed = canary.answersPerSource

        def enough(chunks: list[CaptionChunk]) -> bool:
            return (any(c.error for c in chunks)
                    or sum(isolation.is_answer(c) for c in chunks) >= needed)
        window = canary.freshFrameSeconds + (needed + 2) * canary.chunkDurationSeconds
        run = drv.capture({n: ids[n] for n in ids if n not in refused}, prompt, enough,
                          window).captures
        verdicts = isolation.judge({n: c.chunks for n, c in run.items()}, labels, needed)
        for verdict in verdicts:
            why = refused.get(verdict.source) or refusal(run.get(verdict.source))
            if why:
                verdict.problems.insert(0, why)
        passed = all(v.passed for v in verdicts)
        drv.evidence.write(ISOLATION_FILE, IsolationDocument(
            prompt=prompt, answersPerSource=needed,
            mapping=[ProbeStream(source=s.name, label=s.label, streamId=ids[s.name],
                                 url=drv.urls[s.name]) for s in drv.sources],
            captions={n: [asdict(c) for c in cap.chunks] for n, cap in run.items()},
            verdicts=[IsolationVerdict(**asdict(v), passed=v.passed) for v in verdicts]))
        drv.evidence.gate(GATE_ISOLATION, passed, isolation.summary(verdicts), {
            "file": ISOLATION_FILE, "sources": len(verdicts),
            "failed": [v.source for v in verdicts if not v.passed]})
        self._probe_ids = list(ids.values())
        return passed

    def _probes_gone(self) -> bool:
        drv = self.driver
        drv.progress("deleting the probe streams (one blocking batch) and proving them gone")
        left = drv.delete(self._probe_ids)
        client = drv.make_client()
        try:
            listed = [s.id for s in client.list_streams()]
        finally:
            client.close()
        still = sorted(set(left) | (set(listed) & set(self._probe_ids)))
        reason = (f"{len(self._probe_ids)} probe stream(s) deleted and absent from the listing"
                  if not still else f"probe stream(s) not deleted: {', '.join(still)}")
        drv.evidence.gate(GATE_PROBES_GONE, not still, reason, {
            "deleted": [i for i in self._probe_ids if i not in still], "left": still,
            "listedAfter": listed})
        return not still

    # --- performance -----------------------------------------------------------------------

    def _performance(self) -> bool:
        canary, measure, drv = self.spec.canary, self.spec.measurement, self.driver
        names = [s.name for s in drv.sources]
        units: list[UnitOutcome] = []
        peak = 0
        left: list[str] = []
        fresh_waits: list[float] = []  # per repetition, warm-up runs included
        total = measure.warmupRuns + measure.repetitions
        for rep in range(total):
            warm = rep < measure.warmupRuns
            drv.progress(f"performance: {'warm-up' if warm else 'repetition'} {rep + 1}/"
                         f"{total}, {len(names)} streams for {canary.performanceSeconds}s "
                         + from_first_frame(canary.freshFrameSeconds))
            done = drv.window(f"perf{rep}", names, float(canary.performanceSeconds),
                              rep - measure.warmupRuns, f"evidence/captions/perf{rep}.jsonl",
                              fresh_s=canary.freshFrameSeconds)
            fresh_waits.append(done.fresh_wait_s)
            left += done.left
            if not warm:
                peak = max(peak, done.peak)
                units += done.units
        report = performance_report(units, peak, measure.latencySource)
        problems = [f"{u.source} (repetition {u.repetition + 1}): {why}" for u in units
                    for why in u.failures()]
        p95, gap = report.chunkLatencyMs.p95, report.latencyNotMeasured
        if canary.maxP95LatencyMs is not None and gap is not None:
            problems.append(f"p95 chunk latency {gap}: maxP95LatencyMs "
                            f"{canary.maxP95LatencyMs} ms cannot be judged")
        elif canary.maxP95LatencyMs is not None and p95 is not None and (
                p95 > canary.maxP95LatencyMs):
            problems.append(f"p95 chunk latency {p95} ms is above {canary.maxP95LatencyMs} ms")
        problems += [f"stream {sid} not deleted after its repetition" for sid in left]
        # Nothing failed but a maximum that cannot be judged: INCONCLUSIVE, not FAIL.
        self.latency_unjudged = (canary.maxP95LatencyMs is not None and gap is not None
                                 and len(problems) == 1)
        drv.evidence.write(PERFORMANCE_FILE, CanaryPerformance(
            **dict(report), problems=problems, freshWaitSeconds=fresh_waits))
        ledger = report.ledger
        reason = ("; ".join(problems[:4]) + (f" (and {len(problems) - 4} more)"
                                              if len(problems) > 4 else "")) if problems else (
            f"{ledger.completed}/{ledger.offered} units completed; p95 chunk latency "
            + (f"{p95} ms ({measure.latencySource})" if gap is None else gap)
            + "; 0 dropped chunks")
        drv.evidence.gate(GATE_PERFORMANCE, not problems, reason, {
            "file": PERFORMANCE_FILE, "ledger": ledger.model_dump(mode="json"),
            "chunkLatencyMs": report.chunkLatencyMs.model_dump(mode="json"),
            "latencySource": measure.latencySource, "latencyNotMeasured": gap,
            "droppedChunks": report.droppedChunks})
        return not problems
