"""A candidate against the service it would replace, gate by gate (issue 39's decision).

What VSS teams fear of a new image or model is a release that is slower, holds fewer streams,
drops chunks, mixes streams' answers, leaks GPU memory or answers worse. Each is a gate here,
judged on both sides' measurements from the same window:

  - **latency**: the per-chunk latencies, by ``judge.judge_latency`` (beyond noise and beyond
    ``maxP95Regression``);
  - **capacity**: the capacity search's highest stable stream count may fall by at most
    ``maxCapacityLoss``;
  - **dropped chunks**: the candidate may not drop more than the baseline did;
  - **isolation**: every stream's answers are its own on the candidate (the baseline's are
    shown, not required: a failing baseline is the reason to promote);
  - **GPU memory**: what the candidate leaves allocated after its cleanup, over its start,
    at most ``maxGpuMemoryGrowthMiB``;
  - **accuracy** (a model change): the port validation's grounded share may fall by at most
    ``maxAccuracyLoss``.

A gate neither side measured is not a gate of this qualification and is left out. One side
measured and the other not is no evidence: inconclusive. The decision fails closed: any gate
failed rejects; otherwise any gate inconclusive leaves the current version serving, as a
rejection does, but says to measure again rather than that the candidate is worse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from controllers.kinds.experiments.promotion.judge import LatencyJudgement, judge_latency

GateVerdict = Literal["pass", "fail", "inconclusive"]
NOTHING_MEASURED = ("no gate was measured on either side (no answers, no chunks: each side's "
                    "runs/<side>/ evidence says why)")
DecisionVerdict = Literal["promote", "reject", "inconclusive"]


@dataclass(frozen=True)
class Measured:
    """One side of a qualification, as its runs' evidence says (None: not measured)."""

    chunk_latencies_ms: Sequence[float] = ()
    capacity: int | None = None  # the capacity search's highest stable stream count
    dropped_chunks: int | None = None
    isolated: bool | None = None  # every stream's answers its own (semantic isolation)
    gpu_growth_mib: float | None = None  # GPU memory after cleanup less before the start
    accuracy: float | None = None  # the port validation's share of grounded answers, 0..1


@dataclass(frozen=True)
class Gates:
    """The limits of ``spec.promotion.gates``."""

    max_p95_regression: float = 0.10
    max_capacity_loss: int = 0
    max_gpu_memory_growth_mib: float = 512.0
    max_accuracy_loss: float = 0.0


@dataclass(frozen=True)
class GateResult:
    gate: str
    verdict: GateVerdict
    candidate: str
    baseline: str
    allowed: str
    detail: str = ""

    def line(self) -> str:
        """``capacity: 6 against 8 (at most 0 fewer allowed)``: both numbers, and the limit."""
        said = f"{self.gate}: {self.candidate} against {self.baseline} ({self.allowed})"
        return f"{said}: {self.detail}" if self.detail else said


@dataclass(frozen=True)
class Decision:
    verdict: DecisionVerdict
    gates: list[GateResult]
    latency: LatencyJudgement | None = field(default=None)

    def reason(self) -> str:
        """Each gate that stopped the promotion, with both numbers ("" when promoted)."""
        if not self.gates:
            return NOTHING_MEASURED
        wanted = "fail" if self.verdict == "reject" else "inconclusive"
        return "; ".join(g.line() for g in self.gates if g.verdict == wanted)

    def table(self) -> str:
        """The comparison as a Markdown table (``report.md``)."""
        rows = ["| gate | candidate | baseline | allowed | verdict |",
                "|---|---|---|---|---|"]
        rows += [f"| {g.gate} | {g.candidate} | {g.baseline} | {g.allowed} | {g.verdict} |"
                 for g in self.gates]
        return "\n".join(rows) + "\n"

    def record(self) -> dict[str, Any]:
        """For the promotion bundle: the verdict, every gate, and the latency test's numbers."""
        return {"verdict": self.verdict, "gates": [asdict(g) for g in self.gates],
                "latency": None if self.latency is None else self.latency.record()}


def _one_sided(gate: str, ours: object, theirs: object, allowed: str, unit: str = ""
               ) -> GateResult | None:
    """None when neither side measured the gate; inconclusive when only one did."""
    if ours is None and theirs is None:
        return None
    return GateResult(gate, "inconclusive", _shown(ours, unit), _shown(theirs, unit), allowed,
                      "measured on one side only")


def _shown(value: object, unit: str = "") -> str:
    if value is None:
        return "not measured"
    if isinstance(value, bool):
        return "held" if value else "broken"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}" if unit else text


def _latency(candidate: Measured, baseline: Measured, gates: Gates
             ) -> tuple[GateResult | None, LatencyJudgement | None]:
    if not candidate.chunk_latencies_ms and not baseline.chunk_latencies_ms:
        return None, None
    judged = judge_latency(candidate.chunk_latencies_ms, baseline.chunk_latencies_ms,
                           gates.max_p95_regression)
    verdict: GateVerdict = "fail"
    if judged.verdict != "regression":
        verdict = judged.verdict

    def p95(value: float | None) -> str:
        return "not measured" if value is None else f"p95 {value:.0f} ms"
    return GateResult("latency", verdict, p95(judged.candidate_p95_ms),
                      p95(judged.baseline_p95_ms),
                      f"at most {gates.max_p95_regression:.0%} slower", judged.reason), judged


def _capacity(candidate: Measured, baseline: Measured, gates: Gates) -> GateResult | None:
    allowed = f"at most {gates.max_capacity_loss} fewer streams"
    ours, theirs = candidate.capacity, baseline.capacity
    if ours is None or theirs is None:
        return _one_sided("capacity", ours, theirs, allowed, "streams")
    lost = theirs - ours
    return GateResult("capacity", "fail" if lost > gates.max_capacity_loss else "pass",
                      f"{ours} streams", f"{theirs} streams", allowed,
                      f"{lost} fewer" if lost > 0 else "")


def _dropped(candidate: Measured, baseline: Measured, _gates: Gates) -> GateResult | None:
    allowed = "no more than the baseline"
    ours, theirs = candidate.dropped_chunks, baseline.dropped_chunks
    if ours is None or theirs is None:
        return _one_sided("dropped chunks", ours, theirs, allowed)
    return GateResult("dropped chunks", "fail" if ours > theirs else "pass", str(ours),
                      str(theirs), allowed)


def _isolation(candidate: Measured, baseline: Measured, _gates: Gates) -> GateResult | None:
    allowed = "every stream's answers its own"
    if candidate.isolated is None:
        if baseline.isolated is None:
            return None
        return GateResult("isolation", "inconclusive", _shown(None), _shown(baseline.isolated),
                          allowed, "too few answers on the candidate to judge")
    return GateResult("isolation", "pass" if candidate.isolated else "fail",
                      _shown(candidate.isolated), _shown(baseline.isolated), allowed)


def _gpu_memory(candidate: Measured, baseline: Measured, gates: Gates) -> GateResult | None:
    allowed = f"at most {gates.max_gpu_memory_growth_mib:g} MiB left after cleanup"
    ours = candidate.gpu_growth_mib
    if ours is None:
        return _one_sided("GPU memory", None, baseline.gpu_growth_mib, allowed, "MiB")
    return GateResult("GPU memory", "fail" if ours > gates.max_gpu_memory_growth_mib else
                      "pass", _shown(ours, "MiB"), _shown(baseline.gpu_growth_mib, "MiB"),
                      allowed)


def _accuracy(candidate: Measured, baseline: Measured, gates: Gates) -> GateResult | None:
    allowed = f"at most {gates.max_accuracy_loss:.0%} lower"
    ours, theirs = candidate.accuracy, baseline.accuracy
    if ours is None or theirs is None:
        return _one_sided("accuracy", _percent(ours), _percent(theirs), allowed)
    return GateResult("accuracy", "fail" if theirs - ours > gates.max_accuracy_loss else
                      "pass", f"{ours:.0%}", f"{theirs:.0%}", allowed)


def _percent(share: float | None) -> str | None:
    return None if share is None else f"{share:.0%}"


def decide(candidate: Measured, baseline: Measured, gates: Gates) -> Decision:
    """Every gate either side measured; the promotion's verdict from them (fail closed)."""
    latency, judged = _latency(candidate, baseline, gates)
    results = [r for r in [latency, *(rule(candidate, baseline, gates) for rule in (
        _capacity, _dropped, _isolation, _gpu_memory, _accuracy))] if r is not None]
    verdicts = {r.verdict for r in results}
    verdict: DecisionVerdict = ("reject" if "fail" in verdicts else
                                "inconclusive" if "inconclusive" in verdicts or not results
                                else "promote")
    return Decision(verdict, results, judged)
