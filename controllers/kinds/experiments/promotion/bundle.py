"""The promotion bundle: one sealed folder holding a promotion's decision and all it stood on.

A promotion (or a rejection) is only as believable as what it can show months later, so the
decision is written beside both runs it compared, whole, and sealed over all of it::

    <evidenceRoot>/<promotion ID>/
        runs/candidate/   the candidate's run bundle, copied as it was sealed
        runs/baseline/    the baseline's (side by side, or the last accepted promotion's)
        decision.json     the verdict, every gate with both numbers, the latency test's
                          numbers, and what was compared with what
        gates/<gate>.json one per gate (``state.evidence``: a PASS needs every one passed)
        plots/latency.png both sides' chunk latency
        report.md         the comparison table, the test, the plot, links to both runs
        status.json, events.jsonl, checksums.sha256

``evidence ID --verify`` checks the bundle and, inside it, each run's own checksums. A run
bundle that does not verify is not copied: a decision made on evidence that was changed after
it was sealed is no decision.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from controllers.kinds.experiments import plots
from controllers.kinds.experiments.promotion.gates import Decision, Measured
from state.evidence import REPORT, Evidence, EvidenceError, Verdict, verify

RUNS_DIR = "runs"
DECISION = "decision.json"
LATENCY_PLOT = "plots/latency.png"
VERDICTS: dict[str, Verdict] = {"promote": "PASS", "reject": "FAIL",
                                "inconclusive": "INCONCLUSIVE"}
"""The bundle's verdict: PASS (promoted), FAIL (rejected), INCONCLUSIVE (measure again)."""
WORDS = {"promote": "promoted", "reject": "rejected", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class Compared:
    """What the decision is about: which service, on which Host, moving from what to what."""

    deployment: str
    host: str
    candidate: str  # the image (by digest) and model the candidate ran
    baseline: str
    baseline_from: Literal["sideBySide", "lastAccepted"]
    override: str = ""  # who let a rejected candidate through, and at which revision: the
    # bundle keeps its measured verdict (FAIL) and says the override beside it


def gate_file(gate: str) -> str:
    """``dropped chunks`` -> ``dropped-chunks``: a gate's file name under ``gates/``."""
    return re.sub(r"[^a-z0-9]+", "-", gate.lower()).strip("-")


def write_bundle(root: Path, promotion_id: str, runs: dict[str, Path],
                 sides: dict[str, Measured], decision: Decision, compared: Compared
                 ) -> Verdict:
    """Write and seal the bundle of ``promotion_id`` under ``root``; its verdict. ``runs``
    and ``sides`` are keyed ``candidate`` and ``baseline``. EvidenceError, and nothing
    written, when a run bundle does not verify or the ID was used before."""
    for side, folder in sorted(runs.items()):
        problems = verify(folder)
        if problems:
            raise EvidenceError(f"the {side}'s run bundle {folder} does not verify, so no "
                                f"decision is recorded on it: {problems[0]}"
                                + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                   else ""))
    evidence = Evidence.create(root, promotion_id)
    for side, folder in sorted(runs.items()):
        shutil.copytree(folder, evidence.path(f"{RUNS_DIR}/{side}"), symlinks=True)
    evidence.write_json(DECISION, {**decision.record(), "compared": asdict(compared)})
    for gate in decision.gates:
        evidence.gate(gate_file(gate.gate), gate.verdict == "pass", gate.line(),
                      {**asdict(gate), "verdict": gate.verdict})
    p95s = {"candidate": None if decision.latency is None else decision.latency.candidate_p95_ms,
            "baseline": None if decision.latency is None else decision.latency.baseline_p95_ms}
    evidence.write_bytes(LATENCY_PLOT, plots.latency_side_by_side(
        {side: list(m.chunk_latencies_ms) for side, m in sides.items()},
        f"{compared.deployment}: candidate and baseline", p95s))
    evidence.write_text(REPORT, report(decision, compared))
    reason = decision.reason() or "every gate passed"
    if compared.override:  # the measurement stands as measured; the override is said beside it
        reason = f"{reason}; let through by an operator: {compared.override}"
    verdict = evidence.finish(VERDICTS[decision.verdict],
                              [gate_file(g.gate) for g in decision.gates], reason)
    evidence.seal()
    return verdict


def report(decision: Decision, compared: Compared) -> str:
    """``report.md``: what was compared, the verdict and why, every gate, the latency test."""
    measured = ("measured side by side" if compared.baseline_from == "sideBySide"
                else "the last accepted promotion's")
    lines = [f"# {compared.deployment} on Host {compared.host}: "
             f"{WORDS[decision.verdict]}", "",
             f"- Candidate: `{compared.candidate}`",
             f"- Baseline ({measured}): `{compared.baseline}`"]
    if compared.override:
        lines.append(f"- Let through by an operator: {compared.override}")
    lines += ["", decision.reason() or "Every gate passed.", "", decision.table()]
    if decision.latency is not None and decision.latency.test is not None:
        test = decision.latency.test
        lines += [f"Latency: {decision.latency.reason}. One-sided Mann-Whitney U test of the "
                  f"candidate's chunks, scaled by the allowance, against the baseline's: "
                  f"U={test.u:g}, z={test.z:.3f}, p={test.p_value:.3g} "
                  f"({decision.latency.samples[0]} and {decision.latency.samples[1]} chunks).",
                  ""]
    lines += ["![Chunk latency, candidate and baseline](plots/latency.png)", "",
              f"Runs: [candidate]({RUNS_DIR}/candidate/{REPORT}), "
              f"[baseline]({RUNS_DIR}/baseline/{REPORT}).", ""]
    return "\n".join(lines)
