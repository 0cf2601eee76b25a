"""A run's plots and Markdown report, drawn from the evidence files already in its bundle."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controllers.kinds.experiments import report
from controllers.kinds.experiments.canary.runtype import CanaryPerformance
from controllers.kinds.experiments.capacity.documents import WindowDocument
from controllers.kinds.experiments.ledger import LatencySummary, Ledger, PerformanceReport
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.reportparts import Section
from controllers.kinds.experiments.types import TYPES
from state.evidence import REPORT, Evidence, verify

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CANARY_SPEC = {"type": "canary", "runId": "canary-1", "template": "vlm",
               "service": {"hostPort": 18100}, "measurement": {"claim": "4 streams"},
               "canary": {"streams": 4}}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    return width, height


def capacity_bundle(tmp_path: Path, stable: int = 6) -> Evidence:
    evidence = Evidence.create(tmp_path / "evidence", "cap-1")
    evidence.write_json("manifest.json", {"spec": {"type": "capacity", "measurement": {
        "claim": "6 streams | within 1 s"}}})
    ledger = []
    for i, (streams, p95) in enumerate([(2, 100.0), (4, 180.0), (10, 1900.0), (6, 260.0),
                                        (7, 1800.0)], 1):
        verdict = "stable" if streams <= stable else "unstable"
        file = f"evidence/capacity/cap-1/w{i:02d}-{streams}.json"
        evidence.write(file, WindowDocument(
            streams=streams, verdict=verdict, p95_ms=p95, reason=f"window at {streams}",
            attempt="cap-1", windowSeconds=60, report=PerformanceReport(
                ledger=Ledger(offered=streams, completed=streams), latencySource="ntp_timestamp",
                chunkLatencyMs=LatencySummary(p50=p95 / 2, p95=p95, p99=p95 * 1.1))))
        ledger.append({"attempt": "cap-1", "streams": streams, "verdict": verdict,
                       "p95_ms": p95, "reason": f"window at {streams}", "file": file})
    evidence.write_json("evidence/capacity.json", {
        "highestStable": stable, "firstUnstable": stable + 1, "windowsUsed": 5,
        "attempts": ["cap-1"], "criteria": {"maxP95LatencyMs": 1000}, "ledger": ledger})
    evidence.gate("capacity-boundary", True, "highest stable 6, first unstable 7",
                  {"file": "evidence/capacity.json"})
    return evidence


def gpu_window(samples: int) -> dict[str, Any]:
    return {"GPU-abc": {"uuid": "GPU-abc", "samples": samples, "memory_mean_mib": 1020.0,
                        "memory_max_mib": 1040, "utilization_mean_pct": 50.0}}


def telemetry(readings: list[dict[str, Any]], window: Any) -> dict[str, Any]:
    return {"source": "nvml", "window": window,
            "series": {"fields": ["memoryUsedMiB", "utilizationPct"], "readings": readings}}


def test_a_capacity_bundle_gets_its_ledger_plots_and_a_report_that_embeds_them(
        tmp_path: Path) -> None:
    evidence = capacity_bundle(tmp_path)
    evidence.write_json("evidence/telemetry.json", telemetry(
        [{"at": 100.0 + t, "gpus": {"GPU-abc": [1000 + 10 * t, 50.0]}} for t in range(5)],
        gpu_window(5)))
    written = report.write(evidence, "PASS", "highest stable 6, first unstable 7")
    assert written == [report.LATENCY_PNG, report.MEMORY_PNG, REPORT]
    for png in written[:2]:
        assert png_size(evidence.path(png).read_bytes()) == (700, 420)
    text = evidence.path(REPORT).read_text()
    assert text.startswith("# Run cap-1: PASS\n")
    assert "claim: 6 streams \\| within 1 s" in text  # a | never breaks the table
    assert "| capacity-boundary | PASS | highest stable 6, first unstable 7 |" in text
    assert "Highest stable: **6**, first unstable: **7** live streams, in 5" in text
    assert "| 3 | cap-1 | 10 | unstable | 1900.0 | window at 10 |" in text
    assert f"![Chunk latency]({report.LATENCY_PNG})" in text
    assert f"![GPU memory]({report.MEMORY_PNG})" in text
    evidence.seal()
    assert verify(evidence.folder) == []  # the plots and the report are sealed with the rest


def test_the_boundary_is_drawn_from_the_evidence(tmp_path: Path) -> None:
    one = capacity_bundle(tmp_path / "a")
    two = capacity_bundle(tmp_path / "b", stable=5)
    report.write(one, "PASS", "")
    report.write(two, "PASS", "")
    assert (one.path(report.LATENCY_PNG).read_bytes()
            != two.path(report.LATENCY_PNG).read_bytes())


def test_gpu_memory_not_measured_is_said_never_drawn_as_zero(tmp_path: Path) -> None:
    evidence = capacity_bundle(tmp_path)
    why = "not measured (nvidia-smi on Host local exited 127: not found)"
    evidence.write_json("evidence/telemetry.json", telemetry([], why))
    report.write(evidence, "PASS", "")
    text = evidence.path(REPORT).read_text()
    assert f"during the run: {why}." in text
    assert png_size(evidence.path(report.MEMORY_PNG).read_bytes()) == (700, 420)


def test_a_canary_bundle_plots_its_one_level_and_a_bare_bundle_only_reports(
        tmp_path: Path) -> None:
    evidence = Evidence.create(tmp_path / "evidence", "canary-1")
    evidence.write_json("manifest.json", {"spec": CANARY_SPEC})
    evidence.write("evidence/performance.json", CanaryPerformance(
        ledger=Ledger(offered=4, admitted=4, active=4, completed=4, cleaned_up=4),
        latencySource="ntp_timestamp", chunkLatencyMs=LatencySummary(p50=20, p95=30, p99=35),
        droppedChunks=0))
    assert report.write(evidence, "PASS", "")[0] == report.LATENCY_PNG
    text = evidence.path(REPORT).read_text()
    assert "4 live stream(s): p50 20.0 ms, p95 30.0 ms, p99 35.0 ms; dropped chunks 0." in text
    assert ("| offered | admitted | active | completed | failed | rejected | timed_out | "
            "cleaned_up |") in text
    assert "| 4 | 4 | 4 | 4 | 0 | 0 | 0 | 4 |" in text
    bare = Evidence.create(tmp_path / "evidence", "bare-1")  # interrupted before anything
    assert report.write(bare, "INCONCLUSIVE", "interrupted") == [REPORT]
    assert "## Plots" not in bare.path(REPORT).read_text()


def test_a_window_file_that_cannot_be_read_leaves_a_gap_not_a_failure(tmp_path: Path) -> None:
    evidence = capacity_bundle(tmp_path)
    evidence.path("evidence/capacity/cap-1/w03-10.json").write_text("{not json")
    written = report.write(evidence, "PASS", "")
    assert report.LATENCY_PNG in written


def test_the_daemon_does_not_load_matplotlib_until_a_figure_is_drawn() -> None:
    """matplotlib and numpy cost the daemon about 45 MiB of RSS; most daemons never plot."""
    probe = ("import sys, reconciler.daemon, reconciler.cli\n"
             "print(sorted(m for m in ('matplotlib', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


class _ToyType:
    """A type registered only here: its section reaches the report with no change to it."""

    name = "toy"

    def local_only(self, spec: Any) -> bool:
        return False

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        return Section(["## Toy", "", f"measured {manifest.spec['toy']['widgets']} widgets"])


class _BrokenType(_ToyType):
    name = "broken"

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        raise KeyError("widgets")


def test_each_type_writes_its_own_section_found_through_the_registry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TYPES, "toy", _ToyType())
    monkeypatch.setitem(TYPES, "broken", _BrokenType())
    toy = Evidence.create(tmp_path / "evidence", "toy-1")
    toy.write_json("manifest.json", {"spec": {"type": "toy", "toy": {"widgets": 3}}})
    # Evidence files of another type do not make its section appear: the type decides.
    toy.write_json("evidence/performance.json", {"chunkLatencyMs": {"p95": 30}})
    assert report.write(toy, "PASS", "") == [REPORT]
    text = toy.path(REPORT).read_text()
    assert "## Toy\n\nmeasured 3 widgets" in text
    assert "## Performance" not in text
    broken = Evidence.create(tmp_path / "evidence", "broken-1")
    broken.write_json("manifest.json", {"spec": {"type": "broken"}})
    assert report.write(broken, "FAIL", "") == [REPORT]  # the run's end goes on
    assert "Chunk latency: not drawn (KeyError: 'widgets')" in broken.path(
        REPORT).read_text()
