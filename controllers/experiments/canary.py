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

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from controllers.caption_events import CaptionChunk
from controllers.experiments import isolation
from controllers.experiments.captures import Capture, capture
from controllers.experiments.ledger import UnitOutcome, performance_report
from controllers.experiments.streams import CanarySource, delete_proven, register
from controllers.rtvi_client import RtviClient
from specs.experiment import ExperimentSpec, smokes
from state.evidence import Evidence

GATE_ISOLATION = "semantic-isolation"
GATE_PROBES_GONE = "probe-streams-deleted"
GATE_PERFORMANCE = "performance"
GATE_SMOKE = "smoke"
SMOKE_WINDOW_S = 60.0
ONE_FRAME_ONE_TOKEN = {"max_tokens": 1, "num_frames_per_second_or_fixed_frames_chunk": 1,
                       "use_fps_for_chunking": False}  # a fixed single frame per chunk
SMOKE_PROMPT = "Name the colour or object you see in one word."
ISOLATION_FILE = "evidence/semantic-isolation.json"
PERFORMANCE_FILE = "evidence/performance.json"
PROBE_DELETE_S = 30.0
PERF_PROMPT = "Describe what fills the frame in one short sentence."


def declared_gates(spec: ExperimentSpec) -> list[str]:
    """The gates a PASS of this canary needs (cleanup is the run's own, added by the run)."""
    canary = spec.canary
    assert canary is not None
    gates = [GATE_ISOLATION, GATE_PROBES_GONE] if canary.semanticIsolation else []
    gates += [GATE_SMOKE] if smokes(spec) else []
    return gates + ([] if canary.qualificationOnly else [GATE_PERFORMANCE])


@dataclass
class CanaryRun:
    spec: ExperimentSpec
    sources: list[CanarySource]
    urls: dict[str, str]  # source → RTSP URL
    model: str
    make_client: Callable[[], RtviClient]
    stream_id: Callable[[str, str], str]  # (part, source) → stream ID
    note_streams: Callable[[list[str]], None]  # write-ahead: the run may create these
    evidence: Evidence
    stop: threading.Event
    progress: Callable[[str], None]

    def execute(self) -> bool:
        """Run the canary; True when every gate it judged passed."""
        canary = self.spec.canary
        assert canary is not None
        if canary.semanticIsolation and not (self._isolation() and self._probes_gone()):
            return False
        if canary.qualificationOnly:
            return True
        if smokes(self.spec) and not self._smoke():
            return False
        return self._performance()

    # --- smoke -----------------------------------------------------------------------------

    def _smoke(self) -> bool:
        """One stream, one request for 1 token: its first chunk must bring frames and an
        answer, no error, within a minute; then the stream is deleted and proven gone. A hang,
        a timeout or a stream that stays means the long run would measure a broken service."""
        canary = self.spec.canary
        assert canary is not None
        first = self.sources[0]
        self.progress(f"smoke: 1 frame, 1 token on {first.name}")
        ids = {first.name: self.stream_id("smoke", first.name)}
        refused = self._register(ids, {first.name: first.label})
        run = self._capture({n: i for n, i in ids.items() if n not in refused}, SMOKE_PROMPT,
                            lambda chunks: any(isolation.is_answer(c) for c in chunks),
                            SMOKE_WINDOW_S, ONE_FRAME_ONE_TOKEN)
        client = self.make_client()
        try:
            left = delete_proven(client, list(ids.values()), self._delete_s, self.stop)
        finally:
            client.close()
        cap = run.get(first.name)
        answers = [c for c in (cap.chunks if cap else []) if isolation.is_answer(c)]
        problems = [refused[first.name]] if first.name in refused else []
        problems += [_refusal(cap)] if _refusal(cap) else []
        if not answers:
            problems.append(f"no answer within {SMOKE_WINDOW_S:g}s")
        elif answers[0].error or not answers[0].content.strip():
            problems.append(answers[0].error or "empty answer")
        problems += [f"stream {sid} not deleted" for sid in left]
        reason = "; ".join(problems) or f"answered {answers[0].content!r}; stream deleted"
        self.evidence.gate(GATE_SMOKE, not problems, reason, {
            "source": first.name, "streamId": ids[first.name], "maxTokens": 1,
            "chunks": [asdict(c) for c in (cap.chunks if cap else [])], "left": left})
        return not problems

    # --- semantic isolation ----------------------------------------------------------------

    def _isolation(self) -> bool:
        canary = self.spec.canary
        assert canary is not None
        labels = {s.name: s.label for s in self.sources}
        ids = {s.name: self.stream_id("probe", s.name) for s in self.sources}
        prompt = isolation.forced_choice_prompt(list(labels.values()))
        self.progress(f"semantic isolation: {len(ids)} probe streams, "
                      f"{canary.answersPerSource} answers each")
        refused = self._register(ids, labels)
        needed = canary.answersPerSource

        def enough(chunks: list[CaptionChunk]) -> bool:
            return (any(c.error for c in chunks)
                    or sum(isolation.is_answer(c) for c in chunks) >= needed)
        window = canary.freshFrameSeconds + (needed + 2) * canary.chunkDurationSeconds
        run = self._capture({n: ids[n] for n in ids if n not in refused}, prompt, enough,
                            window)
        verdicts = isolation.judge({n: c.chunks for n, c in run.items()}, labels, needed)
        for verdict in verdicts:
            why = refused.get(verdict.source) or _refusal(run.get(verdict.source))
            if why:
                verdict.problems.insert(0, why)
        passed = all(v.passed for v in verdicts)
        self.evidence.write_json(ISOLATION_FILE, {
            "prompt": prompt, "answersPerSource": needed,
            "mapping": [{"source": s.name, "label": s.label, "streamId": ids[s.name],
                         "url": self.urls[s.name]} for s in self.sources],
            "captions": {n: [asdict(c) for c in cap.chunks] for n, cap in run.items()},
            "verdicts": [asdict(v) | {"passed": v.passed} for v in verdicts]})
        self.evidence.gate(GATE_ISOLATION, passed, isolation.summary(verdicts), {
            "file": ISOLATION_FILE, "sources": len(verdicts),
            "failed": [v.source for v in verdicts if not v.passed]})
        self._probe_ids = list(ids.values())
        return passed

    def _probes_gone(self) -> bool:
        self.progress("deleting the probe streams (one blocking batch) and proving them gone")
        client = self.make_client()
        try:
            left = delete_proven(client, self._probe_ids, self._delete_s, self.stop)
            listed = [s.id for s in client.list_streams()]
        finally:
            client.close()
        still = sorted(set(left) | (set(listed) & set(self._probe_ids)))
        reason = (f"{len(self._probe_ids)} probe stream(s) deleted and absent from the listing"
                  if not still else f"probe stream(s) not deleted: {', '.join(still)}")
        self.evidence.gate(GATE_PROBES_GONE, not still, reason, {
            "deleted": [i for i in self._probe_ids if i not in still], "left": still,
            "listedAfter": listed})
        return not still

    # --- performance -----------------------------------------------------------------------

    def _performance(self) -> bool:
        canary, measure = self.spec.canary, self.spec.measurement
        assert canary is not None
        labels = {s.name: s.label for s in self.sources}
        units: list[UnitOutcome] = []
        peak = 0
        left: list[str] = []
        total = measure.warmupRuns + measure.repetitions
        for rep in range(total):
            warm = rep < measure.warmupRuns
            self.progress(f"performance: {'warm-up' if warm else 'repetition'} {rep + 1}/"
                          f"{total}, {len(labels)} streams for {canary.performanceSeconds}s")
            ids = {n: self.stream_id(f"perf{rep}", n) for n in labels}
            refused = self._register(ids, labels)
            run = self._capture({n: ids[n] for n in ids if n not in refused}, PERF_PROMPT,
                                lambda _chunks: False, float(canary.performanceSeconds))
            client = self.make_client()
            try:
                gone_left = delete_proven(client, list(ids.values()), self._delete_s, self.stop)
            finally:
                client.close()
            left += gone_left
            self._keep_samples(f"evidence/captions/perf{rep}.jsonl", run)
            if warm:
                continue
            peak = max(peak, self._peak)
            for name in labels:
                cap = run.get(name)
                units.append(UnitOutcome(
                    source=name, repetition=rep - measure.warmupRuns,
                    admitted=cap is not None and cap.admitted,
                    rejected=refused.get(name, "") or (cap.rejected if cap else ""),
                    timed_out=cap is not None and cap.timed_out,
                    broken=cap.broken if cap is not None and cap.admitted else "",
                    chunks=cap.chunks if cap else [], cleaned_up=ids[name] not in gone_left))
        report = performance_report(units, peak)
        problems = [f"{u.source} (repetition {u.repetition + 1}): {why}" for u in units
                    for why in u.failures()]
        p95 = report["chunkLatencyMs"]["p95"]
        if canary.maxP95LatencyMs is not None and (p95 is None or p95 > canary.maxP95LatencyMs):
            problems.append(f"p95 chunk latency {p95} ms is above {canary.maxP95LatencyMs} ms")
        problems += [f"stream {sid} not deleted after its repetition" for sid in left]
        report["problems"] = problems
        self.evidence.write_json(PERFORMANCE_FILE, report)
        ledger = report["ledger"]
        reason = ("; ".join(problems[:4]) + (f" (and {len(problems) - 4} more)"
                                              if len(problems) > 4 else "")) if problems else (
            f"{ledger['completed']}/{ledger['offered']} units completed; p95 chunk latency "
            f"{p95} ms; 0 dropped chunks")
        self.evidence.gate(GATE_PERFORMANCE, not problems, reason, {
            "file": PERFORMANCE_FILE, "ledger": ledger,
            "chunkLatencyMs": report["chunkLatencyMs"],
            "droppedChunks": report["droppedChunks"]})
        return not problems

    # --- shared ----------------------------------------------------------------------------

    @property
    def _delete_s(self) -> float:
        """How long a stream deletion may take to be proven (never past the cleanup's own)."""
        return min(PROBE_DELETE_S, float(self.spec.cleanupSeconds))

    _probe_ids: list[str] = field(default_factory=list)
    _peak: int = 0

    def _register(self, ids: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
        self.note_streams(list(ids.values()))  # before the call: a crash cannot lose them
        client = self.make_client()
        try:
            return register(client, ids, self.urls, labels)
        finally:
            client.close()

    def _capture(self, ids: dict[str, str], prompt: str,
                 enough: Callable[[list[CaptionChunk]], bool],
                 window_s: float, extra: dict[str, Any] | None = None) -> dict[str, Capture]:
        canary = self.spec.canary
        assert canary is not None
        self._peak = 0
        if not ids:
            return {}
        bodies: dict[str, dict[str, Any]] = {
            name: {"id": sid, "prompt": prompt, "model": self.model, "stream": True,
                   "max_tokens": canary.maxTokens, "chunk_duration": canary.chunkDurationSeconds,
                   **(extra or {})}
            for name, sid in ids.items()}
        run = capture(self.make_client, bodies, enough, window_s,
                      float(canary.chunkDurationSeconds), self.stop)
        self._peak = run.active_peak
        return run.captures

    def _keep_samples(self, relative: str, run: dict[str, Capture]) -> None:
        lines = [json.dumps({"source": n, **asdict(c)}, sort_keys=True)
                 for n, cap in sorted(run.items()) for c in cap.chunks]
        self.evidence.write_text(relative, "\n".join(lines) + ("\n" if lines else ""))


def _refusal(cap: Capture | None) -> str:
    if cap is None:
        return ""
    return cap.rejected or cap.broken
