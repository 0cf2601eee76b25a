"""The promotion bundle (``controllers.kinds.experiments.promotion.bundle``): the decision,
both runs it stood on, every gate, a plot and the report, sealed together on a real
filesystem; a run bundle changed after sealing is refused and nothing is written."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest

from controllers.kinds.experiments.promotion.bundle import Compared, write_bundle
from controllers.kinds.experiments.promotion.gates import Gates, Measured, decide
from state.evidence import REPORT, Evidence, EvidenceError, verify

COMPARED = Compared(deployment="Deployment/vlm", host="gpu-1",
                    candidate="registry.local/rtvi@sha256:" + "b" * 64,
                    baseline="registry.local/rtvi@sha256:" + "a" * 64, baseline_from="sideBySide")


def _run(root: Path, run_id: str) -> Path:
    """A sealed run bundle as a canary leaves one (trimmed to what the bundle copies)."""
    evidence = Evidence.create(root, run_id)
    evidence.gate("performance", True, "measured", {"chunks": 300})
    evidence.write_text(REPORT, f"# run {run_id}\n")
    evidence.finish("PASS", ["performance"], "every gate passed")
    evidence.seal()
    return evidence.folder


def _side(seed: int, scale: float = 1.0) -> Measured:
    rng = random.Random(seed)
    return Measured(chunk_latencies_ms=[scale * 400 * math.exp(rng.gauss(0, 0.3))
                                        for _ in range(300)], capacity=8, isolated=True)


def test_a_rejection_is_sealed_with_both_runs_every_gate_and_the_report(tmp_path: Path) -> None:
    runs = {"candidate": _run(tmp_path / "runs", "cand-1"),
            "baseline": _run(tmp_path / "runs", "base-1")}
    sides = {"candidate": _side(1, scale=1.2), "baseline": _side(2)}
    decision = decide(sides["candidate"], sides["baseline"], Gates())
    assert decision.verdict == "reject"
    root = tmp_path / "evidence"
    assert write_bundle(root, "promote-vlm-1", runs, sides, decision, COMPARED) == "FAIL"
    folder = root / "promote-vlm-1"
    assert verify(folder) == []
    assert verify(folder / "runs" / "candidate") == []  # each run's own seal, kept inside
    recorded = json.loads((folder / "decision.json").read_text())
    assert recorded["verdict"] == "reject"
    assert recorded["compared"]["candidate"] == COMPARED.candidate
    assert recorded["latency"]["test"]["p_value"] < 0.05
    latency = json.loads((folder / "gates" / "latency.json").read_text())
    assert latency["passed"] is False
    assert "slower than allowed, beyond noise" in latency["reason"]
    assert json.loads((folder / "gates" / "capacity.json").read_text())["passed"] is True
    status = json.loads((folder / "status.json").read_text())
    assert (status["result"], status["reason"].split(":")[0]) == ("FAIL", "latency")
    text = (folder / "report.md").read_text()
    assert text.startswith("# Deployment/vlm on Host gpu-1: rejected")
    assert "| latency | p95 " in text
    assert "Mann-Whitney U" in text
    assert "[candidate](runs/candidate/report.md)" in text
    assert (folder / "plots" / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(EvidenceError, match="was used before"):  # a decision is made once
        write_bundle(root, "promote-vlm-1", runs, sides, decision, COMPARED)


def test_a_promotion_passes_and_an_override_is_said_beside_the_measurement(
        tmp_path: Path) -> None:
    runs = {"candidate": _run(tmp_path / "runs", "cand-2"),
            "baseline": _run(tmp_path / "runs", "base-2")}
    sides = {"candidate": _side(3), "baseline": _side(4)}
    good = decide(sides["candidate"], sides["baseline"], Gates())
    assert write_bundle(tmp_path / "ev", "promote-ok", runs, sides, good, COMPARED) == "PASS"
    slow = {"candidate": _side(5, scale=1.3), "baseline": sides["baseline"]}
    bad = decide(slow["candidate"], slow["baseline"], Gates())
    let_through = dataclasses.replace(COMPARED, override="approved by ops at rev abc123")
    # The override does not rewrite the measurement: the bundle stays FAIL and says who.
    assert write_bundle(tmp_path / "ev", "promote-override", runs, slow, bad,
                        let_through) == "FAIL"
    folder = tmp_path / "ev" / "promote-override"
    assert "let through by an operator: approved by ops at rev abc123" in json.loads(
        (folder / "status.json").read_text())["reason"]
    assert "Let through by an operator: approved by ops at rev abc123" in (
        folder / "report.md").read_text()
    assert verify(folder) == []


def test_a_run_bundle_changed_after_sealing_is_refused_and_nothing_is_written(
        tmp_path: Path) -> None:
    runs = {"candidate": _run(tmp_path / "runs", "cand-3"),
            "baseline": _run(tmp_path / "runs", "base-3")}
    (runs["baseline"] / "report.md").write_text("# edited after the run\n")
    sides = {"candidate": _side(6), "baseline": _side(7)}
    decision = decide(sides["candidate"], sides["baseline"], Gates())
    with pytest.raises(EvidenceError, match=r"the baseline's run bundle .* does not verify"):
        write_bundle(tmp_path / "ev", "promote-x", runs, sides, decision, COMPARED)
    assert not (tmp_path / "ev" / "promote-x").exists()
