"""The port validation's evidence document and its section of ``report.md``: the BYOM report's
facts (``rules.md``, portValidation: Report), from that document and the bundle's manifest."""

from __future__ import annotations

from typing import Any

from pydantic import Field, computed_field

from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.reportparts import Section, cell
from specs.experiments.portvalidation import IntegrationPath, ModelContract
from state.evidence import Document, Evidence

PORT_FILE = "evidence/port-validation.json"


class Row(Document):
    """One request and its verdict (a smoke row or an accuracy item), as sent and answered:
    filled in as the request goes, and written as it is."""

    name: str
    modality: str
    prompt: str
    facts: list[str] = Field(default_factory=list)
    absent: list[str] = Field(default_factory=list)
    answer: str = ""
    finish_reason: str | None = None
    latency_ms: float | None = None
    completion_tokens: int | None = None
    problems: list[str] = Field(default_factory=list)
    raw: dict[str, Any] = Field(default_factory=dict)  # the service's answer, as it came

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return not self.problems


class GateVerdict(Document):
    passed: bool
    reason: str = ""


class AccuracySummary(Document):
    correct: int = 0
    total: int = 0
    rate: float = 0.0
    minimum: float = 1.0


class RequestPerformance(Document):
    """Latency and throughput of the validation's own requests (a sanity figure)."""

    requests: int = 0
    latencyMsMedian: float | None = None
    latencyMsMax: float | None = None
    completionTokensPerSecond: float | None = None


class PortDocument(Document):
    """``evidence/port-validation.json``: the BYOM report's facts and verdicts."""

    overall: str
    model: ModelContract
    integration: IntegrationPath
    modalities: list[str] = Field(default_factory=list)
    platforms: list[str] = Field(default_factory=list)
    gates: dict[str, GateVerdict] = Field(default_factory=dict)
    smoke: list[Row] = Field(default_factory=list)
    accuracy: AccuracySummary = Field(default_factory=AccuracySummary)
    performance: RequestPerformance = Field(default_factory=RequestPerformance)
    blockers: list[str] = Field(default_factory=list)
    nextStep: str = ""


def section(evidence: Evidence, manifest: RunManifest) -> Section:
    port = evidence.read(PORT_FILE, PortDocument)
    if port is None:
        return Section()
    service = manifest.service
    template = manifest.template.spec if manifest.template is not None else {}
    eager = template.get("eager")
    runtime = manifest.runtime
    path, perf, accuracy = port.integration, port.performance, port.accuracy
    pinned = (", ".join(service.imageDigests) or service.imageId) if service else "-"
    lines = ["## Port validation", "", f"Overall: **{port.overall}**", "",
             "| fact | value |", "|---|---|",
             *(f"| {k} | {cell(v) if v not in ([], None) else 'none'} |"
               for k, v in sorted(port.model.model_dump(mode="json").items())),
             f"| backend | {cell(_backend(manifest.model))} |",
             f"| integration path | {cell(path.path)}"
             f"{cell(' (' + path.reason + ')') if path.reason else ''} |",
             f"| image | {cell(service.image if service else '-')} ({cell(pinned)}) |",
             f"| eager mode requested | "
             f"{'on: ' + cell(eager.get('blocker', '')) if isinstance(eager, dict) else 'off'} |",
             *(f"| {key} (as the service logged it) | {cell(value)} |"
               for key, value in sorted((runtime.reported if runtime else {}).items())),
             *(f"| {key} | not reported by the service |"
               for key in (runtime.notReported if runtime else [])),
             f"| platforms | {cell(', '.join(port.platforms) or '-')} |", "",
             "| smoke row | modality | verdict | answer | problems |", "|---|---|---|---|---|"]
    lines += [f"| {r.name} | {r.modality} | {'PASS' if r.passed else 'FAIL'} | "
              f"{cell(r.answer[:120])} | {cell('; '.join(r.problems) or '-')} |"
              for r in port.smoke]
    lines += ["", f"Accuracy: {accuracy.correct}/{accuracy.total} (minimum "
              f"{accuracy.minimum}). Requests: {perf.requests}, median latency "
              f"{perf.latencyMsMedian} ms, {perf.completionTokensPerSecond} "
              "completion tokens/s.", ""]
    lines += ["Blockers: " + ("; ".join(cell(b) for b in port.blockers) if port.blockers
                              else "none"), "", f"Next bounded step: {cell(port.nextStep)}"]
    return Section(lines)


def _backend(model: dict[str, Any]) -> str:
    """The template's model backend as its spec names it (``use``, or the preset it expands)."""
    if model.get("use"):
        return str(model["use"])
    return f"preset {model['preset']}" if model.get("preset") else "-"
