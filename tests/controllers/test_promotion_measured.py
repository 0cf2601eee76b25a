"""A side of a qualification read from its canary's evidence files (never from memory), and the
report section the decision makes of both sides."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict
from pathlib import Path

from controllers.kinds.experiments import isolation
from controllers.kinds.experiments.canary.runtype import (
    GATE_ISOLATION,
    ISOLATION_FILE,
    PERFORMANCE_FILE,
    CanaryPerformance,
    IsolationDocument,
    IsolationVerdict,
)
from controllers.kinds.experiments.capacity.documents import CAPACITY_FILE, CapacityDocument
from controllers.kinds.experiments.ledger import performance_report
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.promotion import accepted
from controllers.kinds.experiments.promotion.capacity import capacity_of
from controllers.kinds.experiments.promotion.gates import Gates, Measured, decide
from controllers.kinds.experiments.promotion.measured import samples_file, side_measured
from controllers.kinds.experiments.promotion.runtype import (
    PromotionType,
    side_evidence,
    side_sources,
    write_decision,
)
from controllers.kinds.experiments.streams import canary_sources
from controllers.kinds.streamset.caption_events import CaptionChunk
from specs.experiments.canary import CanarySpec
from specs.experiments.promotion import PromotionExperimentSpec
from state.evidence import MANIFEST, Evidence


def _promotion_spec(streams: int = 2, **run: str) -> PromotionExperimentSpec:
    return PromotionExperimentSpec.model_validate({
        "type": "promotion", "runId": "vlm-q-2", "template": "vlm",
        "service": {"hostPort": 18100}, "measurement": {"claim": "as good"},
        "promotion": {"deployment": "vlm", "candidate": "a" * 64, "baseline": {"host": 18000},
                      "canary": {"streams": streams}, **run}})


def _chunk(latency_ms: float, frames: int = 4, error: str = "", content: str = "red") -> str:
    return json.dumps({"source": "red", "content": content, "frame_count": frames,
                       "error": error, "chunk_latency_ms": latency_ms})


def _side(tmp_path: Path, name: str, reps: list[list[str]], dropped: int = 0,
          answers: tuple[list[str], list[str]] = (["red"] * 3, ["green"] * 3)) -> Evidence:
    """A side's evidence; ``answers``: what the red and the green stream answered."""
    run = Evidence.create(tmp_path, f"run-{name}")
    side = side_evidence(run, name)
    for rep, lines in enumerate(reps):
        side.write_text(samples_file(rep), "\n".join(lines) + "\n")
    report = dict(performance_report([], 0, "processing_latency"))
    side.write(PERFORMANCE_FILE, CanaryPerformance(**{**report, "droppedChunks": dropped}))
    chunks = {src: [CaptionChunk(content=f"The frame shows {a}.", frame_count=1) for a in said]
              for src, said in zip(("red", "green"), answers, strict=True)}
    verdicts = isolation.judge(chunks, {"red": "red", "green": "green"}, 3)
    side.write(ISOLATION_FILE, IsolationDocument(
        prompt="which colour?", answersPerSource=3,
        verdicts=[IsolationVerdict(**asdict(v), passed=v.passed) for v in verdicts]))
    side.gate(GATE_ISOLATION, all(v.passed for v in verdicts), "why", {"sources": 2})
    return side


def test_a_side_is_its_measured_repetitions_answered_chunks(tmp_path: Path) -> None:
    warm = [_chunk(9000.0)] * 3  # the warm-up's chunks are not measured
    measured = [_chunk(100.0), _chunk(120.0), _chunk(5.0, frames=0),  # no frame: no answer
                _chunk(7.0, error="boom"), _chunk(8.0, content="  "), "{not json",
                json.dumps({"content": "x"}), _chunk(130.0)]
    side = _side(tmp_path, "candidate", [warm, measured], dropped=2,
                 answers=(["green"] * 3, ["red"] * 3))  # each answers for the other
    found = side_measured(side, warmups=1, repetitions=1, source="processing_latency")
    assert list(found.chunk_latencies_ms) == [100.0, 120.0, 130.0]
    assert found.dropped_chunks == 2
    assert found.isolated is False
    # Nothing written: nothing measured (None, never zero).
    empty = side_measured(side_evidence(Evidence.create(tmp_path, "bare"), "baseline"), 0, 1,
                          "processing_latency")
    assert (list(empty.chunk_latencies_ms), empty.dropped_chunks, empty.isolated) == \
        ([], None, None)


def test_missing_answers_leave_isolation_unjudged_and_wrong_ones_break_it(
        tmp_path: Path) -> None:
    """A source that sent no frames fails both sides alike: that says nothing of either
    service (None), whereas one answer naming another stream's colour is crosstalk (False)."""
    def isolated(name: str, red: list[str]) -> bool | None:
        side = _side(tmp_path, name, [], answers=(red, ["green"] * 3))
        return side_measured(side, 0, 1, "processing_latency").isolated
    assert isolated("whole", ["red"] * 3) is True
    assert isolated("silent", []) is None
    assert isolated("few", ["red"]) is None
    assert isolated("mixed", ["red", "green"]) is False


def test_the_decision_is_written_gate_by_gate_and_reported_side_by_side(
        tmp_path: Path) -> None:
    run = Evidence.create(tmp_path, "qualify-1")
    sides = {"candidate": Measured([300.0 + i for i in range(30)], dropped_chunks=0,
                                   isolated=True),
             "baseline": Measured([100.0 + i for i in range(30)], dropped_chunks=0,
                                  isolated=True)}
    decision = decide(sides["candidate"], sides["baseline"], Gates(max_p95_regression=0.1))
    write_decision(run, decision, sides)
    assert decision.verdict == "reject"
    gates = run.gates()
    assert not gates["latency"].passed
    assert gates["dropped-chunks"].passed
    assert gates["isolation"].passed
    section = PromotionType().report(run, RunManifest())
    text = "\n".join(section.lines)
    assert "Decision: reject" in text
    assert "| latency | p95 328 ms | p95 128 ms | at most 10% slower | fail |" in text, text
    assert section.plot is not None
    assert section.plot.startswith(b"\x89PNG")
    # A run that never decided has no section (and no traceback).
    assert PromotionType().report(Evidence.create(tmp_path, "never"), RunManifest()).lines == []


def test_each_side_publishes_the_same_pictures_from_its_own_publishers() -> None:
    sources = canary_sources(CanarySpec(streams=4))
    candidate, baseline = side_sources(sources, "candidate"), side_sources(sources, "baseline")
    assert [s.name for s in candidate] == ["c-red", "c-green", "c-blue", "c-yellow"]
    assert [s.desired.spec.name for s in baseline] == ["b-red", "b-green", "b-blue", "b-yellow"]
    assert [s.label for s in candidate] == [s.label for s in baseline] == [s.label for s in
                                                                           sources]
    assert [s.desired.spec.synthetic for s in candidate] == [s.desired.spec.synthetic
                                                             for s in sources]


def test_each_sides_capacity_is_read_from_its_search_and_judged_with_the_loss_allowed(
        tmp_path: Path) -> None:
    """The capacity gate reads what each side's search wrote: a search that stopped on a fault
    is no capacity (inconclusive), one whose first count was unstable held none, and the
    candidate may hold at most maxCapacityLoss fewer streams; both are in the report."""
    run = Evidence.create(tmp_path, "qualify-cap")

    def searched(side: str, **found: object) -> None:
        side_evidence(run, side).write(CAPACITY_FILE, CapacityDocument(
            windowsUsed=3, **found))
    searched("candidate", highestStable=2, firstUnstable=3, found=True)
    searched("baseline", highestStable=4, firstUnstable=5, found=True)
    assert capacity_of(side_evidence(run, "candidate")) == 2
    assert capacity_of(Evidence.create(tmp_path, "unsearched")) is None
    fewer = decide(Measured(capacity=2), Measured(capacity=4), Gates(max_capacity_loss=1))
    (gate,) = fewer.gates
    assert (fewer.verdict, gate.line()) == (
        "reject", "capacity: 2 streams against 4 streams (at most 1 fewer streams): 2 fewer")
    assert decide(Measured(capacity=3), Measured(capacity=4),
                  Gates(max_capacity_loss=1)).verdict == "promote"
    write_decision(run, fewer, {"candidate": Measured(capacity=2),
                                "baseline": Measured(capacity=4)})
    text = "\n".join(PromotionType().report(run, RunManifest()).lines)
    assert "| candidate | 2 | 3 | 3 |  |" in text, text
    assert "| baseline | 4 | 5 | 3 |  |" in text, text
    searched("candidate", inconclusive="a stream failed (a fault, not a capacity signal)")
    assert capacity_of(side_evidence(run, "candidate")) is None
    searched("candidate", firstUnstable=1)
    assert capacity_of(side_evidence(run, "candidate")) == 0


def test_the_last_accepted_run_stands_in_for_the_running_version_only_when_comparable(
        tmp_path: Path) -> None:
    """``baseline: lastAccepted``: the numbers a qualification kept of its candidate serve the
    next one as its baseline, under the same load on the same Host and GPU model; anything
    else is measured side by side, and the decision says why."""
    spec = _promotion_spec(baselineFrom="lastAccepted")
    host = {"name": "local", "facts": {"gpus": [{"uuid": "GPU-1", "name": "NVIDIA H100"}]}}
    earlier = Evidence.create(tmp_path, "vlm-q-1")
    earlier.write_json(MANIFEST, {"host": host})
    kept = Measured([100.0, 110.0], capacity=4, dropped_chunks=0, isolated=True)
    accepted.keep_candidate(earlier, spec, kept)
    now = Evidence.create(tmp_path, "vlm-q-2")
    now.write_json(MANIFEST, {"host": host})
    found = accepted.baseline_for(now, spec, "vlm-q-1")
    assert found.measured == dataclasses.replace(kept, chunk_latencies_ms=(100.0, 110.0))
    assert found.record()["from"] == "lastAccepted"
    assert not accepted.baseline_for(now, _promotion_spec(), "vlm-q-1").measured  # sideBySide
    for why, run, later in (
            ("no accepted qualification of the running version", None, spec),
            ("kept no measurements of its candidate", "vlm-q-9", spec),
            ("measured under another load", "vlm-q-1",
             _promotion_spec(baselineFrom="lastAccepted", streams=4))):
        fallback = accepted.baseline_for(now, later, run)
        assert fallback.measured is None, fallback
        assert why in fallback.why, fallback
        assert fallback.record()["from"] == "sideBySide"
    other = Evidence.create(tmp_path, "vlm-q-3")
    other.write_json(MANIFEST, {"host": {**host, "facts": {"gpus": [{"name": "NVIDIA B200"}]}}})
    assert "another Host or GPU model" in accepted.baseline_for(other, spec, "vlm-q-1").why
