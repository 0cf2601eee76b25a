"""A run's plots and its Markdown report, written into the bundle before it is sealed.

Built only from the evidence files already written (each type's own, the telemetry), never from
the run's memory: the report says nothing a reader cannot trace to a file in the same bundle,
and a run recovered after a crash gets one too. The header, the gates and the GPU memory are
the same for every type; the type's own section comes from its implementation
(``ExperimentType.report``), found through the registry by the manifest's ``spec.type``. A plot
or a section that cannot be drawn is named in the report, and the run's result never depends on
it.
"""

from __future__ import annotations

from collections.abc import Callable

from controllers.kinds.experiments import plots
from controllers.kinds.experiments.manifest import RunManifest, read_manifest
from controllers.kinds.experiments.reportparts import Section, cell
from controllers.kinds.experiments.telemetry import EVIDENCE_FILE as TELEMETRY_FILE
from controllers.kinds.experiments.telemetry import TelemetryDocument
from controllers.kinds.experiments.types import TYPES
from state.evidence import PLOTS_DIR, REPORT, Evidence

LATENCY_PNG = f"{PLOTS_DIR}/latency-by-streams.png"
MEMORY_PNG = f"{PLOTS_DIR}/gpu-memory.png"


def _type_section(evidence: Evidence, manifest: RunManifest) -> Section:
    kind = TYPES.get(manifest.type)
    return kind.report(evidence, manifest) if kind is not None else Section()


def _memory(evidence: Evidence) -> Section:
    telemetry = evidence.read(TELEMETRY_FILE, TelemetryDocument)
    if telemetry is None:
        return Section()
    readings = telemetry.series.readings
    series: dict[str, list[tuple[float, int]]] = {}
    for reading in readings:
        for uuid, (memory, _util) in reading.gpus.items():
            series.setdefault(uuid, []).append((reading.at, memory))
    why = telemetry.window if isinstance(telemetry.window, str) else ""
    lines = ["## GPU telemetry", "", f"Source: {telemetry.source or 'none'}; during the "
             f"run: {why or f'{len(readings)} reading(s)'}."]
    return Section(lines, plots.gpu_memory(series, f"{evidence.folder.name}: GPU memory", why))


def write(evidence: Evidence, result: str, reason: str) -> list[str]:
    """Draw the plots and write ``report.md``; the files written (relative to the bundle)."""
    manifest = read_manifest(evidence) or RunManifest()
    measurement = manifest.spec.get("measurement")
    claim = measurement.get("claim", "-") if isinstance(measurement, dict) else "-"
    lines = [f"# Run {evidence.folder.name}: {result}", "",
             *([cell(reason), ""] if reason else []),
             f"Experiment type: {manifest.type or '?'}; claim: {cell(claim)}", "",
             "## Gates", "", "| gate | verdict | reason |", "|---|---|---|"]
    lines += [f"| {g.name} | {'PASS' if g.passed else 'FAIL'} | {cell(g.reason)} |"
              for g in evidence.gates().values()]
    written: list[str] = []
    figures: list[str] = []
    for relative, (drawn, section), caption in (
            (LATENCY_PNG, _safe(lambda: _type_section(evidence, manifest)), "Chunk latency"),
            (MEMORY_PNG, _safe(lambda: _memory(evidence)), "GPU memory")):
        lines += ["", *section.lines] if section.lines else []
        if isinstance(drawn, bytes):
            evidence.write_bytes(relative, drawn)
            written.append(relative)
            figures.append(f"![{caption}]({relative})")
        elif isinstance(drawn, str):
            figures.append(f"{caption}: not drawn ({drawn})")
    if figures:
        lines += ["", "## Plots", "", *(f"{f}\n" for f in figures)]
    evidence.write_text(REPORT, "\n".join(lines).rstrip() + "\n")
    return [*written, REPORT]


def _safe(draw: Callable[[], Section]) -> tuple[bytes | str | None, Section]:
    """The plot (or why it failed) and the section: a section that fails says why in the
    report instead of failing the run's end."""
    try:
        section = draw()
    except Exception as exc:  # any drawing failure is reported, never raised
        return f"{type(exc).__name__}: {exc}", Section()
    return section.plot, section
