"""The port validation's section of ``report.md``: the BYOM report's facts (``rules.md``,
portValidation: Report), from its evidence file and the bundle's manifest."""

from __future__ import annotations

from typing import Any

from controllers.experiments.reportparts import Section, cell, load_json
from state.evidence import Evidence

PORT_FILE = "evidence/port-validation.json"


def section(evidence: Evidence, manifest: dict[str, Any]) -> Section:
    port = load_json(evidence, PORT_FILE)
    if not port:
        return Section()
    model = port.get("model") or {}
    service = manifest.get("service") or {}
    template = (manifest.get("template") or {}).get("spec") or {}
    eager = template.get("eager")
    raw = manifest.get("runtime")
    runtime: dict[str, Any] = raw if isinstance(raw, dict) else {}
    path = port.get("integration") or {}
    perf = port.get("performance") or {}
    accuracy = port.get("accuracy") or {}
    pinned = ", ".join(service.get("imageDigests") or []) or str(service.get("imageId", "-"))
    lines = ["## Port validation", "", f"Overall: **{port.get('overall')}**", "",
             "| fact | value |", "|---|---|",
             *(f"| {k} | {cell(v) if v not in ([], None) else 'none'} |"
               for k, v in sorted(model.items())),
             f"| backend | {cell(_backend(manifest.get('model') or {}))} |",
             f"| integration path | {cell(path.get('path', '-'))}"
             f"{cell(' (' + path['reason'] + ')') if path.get('reason') else ''} |",
             f"| image | {cell(service.get('image', '-'))} ({cell(pinned)}) |",
             f"| eager mode requested | "
             f"{'on: ' + cell(eager.get('blocker', '')) if eager else 'off'} |",
             *(f"| {key} (as the service logged it) | {cell(value)} |"
               for key, value in sorted(runtime.get("reported", {}).items())),
             *(f"| {key} | not reported by the service |"
               for key in runtime.get("notReported", [])),
             f"| platforms | {cell(', '.join(port.get('platforms') or []) or '-')} |", "",
             "| smoke row | modality | verdict | answer | problems |", "|---|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['modality']} | {'PASS' if r['passed'] else 'FAIL'} | "
              f"{cell(r['answer'][:120])} | {cell('; '.join(r['problems']) or '-')} |"
              for r in port.get("smoke") or []]
    lines += ["", f"Accuracy: {accuracy.get('correct')}/{accuracy.get('total')} (minimum "
              f"{accuracy.get('minimum')}). Requests: {perf.get('requests')}, median latency "
              f"{perf.get('latencyMsMedian')} ms, {perf.get('completionTokensPerSecond')} "
              "completion tokens/s.", ""]
    blockers = port.get("blockers") or []
    lines += ["Blockers: " + ("; ".join(cell(b) for b in blockers) if blockers else "none"),
              "", f"Next bounded step: {cell(port.get('nextStep'))}"]
    return Section(lines)


def _backend(model: dict[str, Any]) -> str:
    """The template's model backend as its spec names it (``use``, or the preset it expands)."""
    if model.get("use"):
        return str(model["use"])
    return f"preset {model['preset']}" if model.get("preset") else "-"
