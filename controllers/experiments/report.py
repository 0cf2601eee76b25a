"""A run's plots and its Markdown report, written into the bundle before it is sealed.

Built only from the evidence files already written (the capacity ledger and its windows, the
performance report, the telemetry), never from the run's memory: the report says nothing a
reader cannot trace to a file in the same bundle, and a run recovered after a crash gets one
too. A plot that cannot be drawn is named in the report, and the run's result never depends
on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controllers.experiments import plots
from controllers.experiments.benchmark import BENCH_FILE
from controllers.experiments.canary import PERFORMANCE_FILE
from controllers.experiments.capacityrun import CAPACITY_FILE
from controllers.experiments.portvalidation import PORT_FILE
from state.evidence import PLOTS_DIR, REPORT, Evidence

LATENCY_PNG = f"{PLOTS_DIR}/latency-by-streams.png"
MEMORY_PNG = f"{PLOTS_DIR}/gpu-memory.png"


def _load(evidence: Evidence, relative: str) -> dict[str, Any]:
    try:
        data = json.loads(evidence.path(relative).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _point(streams: int, latency: Any, verdict: str = "") -> plots.LatencyPoint:
    lat = latency if isinstance(latency, dict) else {}
    return plots.LatencyPoint(streams, lat.get("p50"), lat.get("p95"), lat.get("p99"), verdict)


def _latency(evidence: Evidence, run: str, spec: dict[str, Any]
             ) -> tuple[bytes | None, list[str]]:
    """The latency plot and the report's lines about load (capacity or canary)."""
    capacity = _load(evidence, CAPACITY_FILE)
    if capacity:
        ledger = capacity.get("ledger") or []
        points = [_point(w["streams"], (_load(evidence, w["file"]).get("report") or {})
                         .get("chunkLatencyMs"), w["verdict"]) for w in ledger]
        lines = ["## Capacity", "",
                 f"Highest stable: **{capacity.get('highestStable')}**, first unstable: "
                 f"**{capacity.get('firstUnstable')}** live streams, in "
                 f"{capacity.get('windowsUsed')} stability window(s) "
                 f"(attempts: {', '.join(capacity.get('attempts') or [])}).", "",
                 "| # | attempt | streams | verdict | p95 (ms) | reason |",
                 "|---|---|---|---|---|---|"]
        lines += [f"| {i} | {w['attempt']} | {w['streams']} | {w['verdict']} | "
                  f"{w['p95_ms'] if w['p95_ms'] is not None else '-'} | "
                  f"{_cell(w['reason'])} |" for i, w in enumerate(ledger, 1)]
        max_p95 = (capacity.get("criteria") or {}).get("maxP95LatencyMs")
        png = plots.latency_by_streams(points, f"{run}: chunk latency by live streams", max_p95,
                                       (capacity.get("highestStable"),
                                        capacity.get("firstUnstable")))
        return png, lines
    bench = _load(evidence, BENCH_FILE)
    if bench:
        return _benchmark(run, bench)
    performance = _load(evidence, PERFORMANCE_FILE)
    if performance:
        streams = int((spec.get("canary") or {}).get("streams") or 0)
        latency = performance.get("chunkLatencyMs") or {}
        ledger = performance.get("ledger") or {}
        lines = ["## Performance", "",
                 f"{streams} live stream(s): p50 {latency.get('p50')} ms, p95 "
                 f"{latency.get('p95')} ms, p99 {latency.get('p99')} ms; dropped chunks "
                 f"{performance.get('droppedChunks')}.", "",
                 "| " + " | ".join(ledger) + " |", "|" + "---|" * len(ledger),
                 "| " + " | ".join(str(v) for v in ledger.values()) + " |"]
        canary = spec.get("canary") or {}
        png = plots.latency_by_streams([_point(streams, latency)],
                                       f"{run}: chunk latency at {streams} live streams",
                                       canary.get("maxP95LatencyMs"))
        return png, lines
    return None, []


def _benchmark(run: str, bench: dict[str, Any]) -> tuple[bytes | None, list[str]]:
    """The harness's run: its handles and verdict; a file burst's levels, plotted."""
    handles = bench.get("handles") or {}
    lines = ["## Benchmark", "",
             f"Scenario {bench.get('scenario')} ({bench.get('mode')}, "
             f"{bench.get('startPolicy')} start, {bench.get('apiMode')}, "
             f"{'EVS' if bench.get('evs') else 'non-EVS baseline'}): "
             f"{'accepted' if bench.get('accepted') else 'not accepted'}; exit code "
             f"{bench.get('exitCode')}; prompt tokens {bench.get('promptTokens')}.", "",
             *(f"- {k.upper()}: `{_cell(str(v))}`" for k, v in sorted(handles.items()))]
    lines += [f"- problem: {_cell(p)}" for p in bench.get("problems") or []]
    if bench.get("staleLog"):
        lines.append(f"- the log was quiet {len(bench['staleLog'])} time(s): inspected, not "
                     "stopped")
    pair = bench.get("pairing")
    if isinstance(pair, dict):
        lines.append(f"- pairing with {pair.get('other')}: {_cell(str(pair.get('reason')))}")
    burst = bench.get("fileBurst")
    if not isinstance(burst, dict):
        return None, lines
    levels = burst.get("levels") or []
    lines += ["", "| concurrency | status | p95 (ms) | p99 (ms) | error |", "|---|---|---|---|---|"]
    lines += [f"| {lv.get('concurrency')} | {lv.get('status')} | {lv.get('p95_ms')} | "
              f"{lv.get('p99_ms')} | {_cell(str(lv.get('error') or '-'))} |" for lv in levels]
    lines += ["", f"Last clean level: {burst.get('lastClean')}; first failure: "
              f"{_cell(str(burst.get('firstFailure')))}"]
    points = [plots.LatencyPoint(int(lv.get("concurrency") or 0), None, lv.get("p95_ms"),
                                 lv.get("p99_ms"), "unstable" if lv.get("status") != "PASS"
                                 else "stable") for lv in levels]
    png = plots.latency_by_streams(points, f"{run}: file-burst latency per concurrency level",
                                   xlabel="concurrent file requests")
    return png, lines


def _port(evidence: Evidence, manifest: dict[str, Any]) -> list[str]:
    """The BYOM report's facts (``rules.md``, portValidation: Report)."""
    port = _load(evidence, PORT_FILE)
    if not port:
        return []
    model = port.get("model") or {}
    service = manifest.get("service") or {}
    template = (manifest.get("template") or {}).get("spec") or {}
    eager = template.get("eager")
    path = port.get("integration") or {}
    perf = port.get("performance") or {}
    accuracy = port.get("accuracy") or {}
    pinned = ", ".join(service.get("imageDigests") or []) or str(service.get("imageId", "-"))
    lines = ["## Port validation", "", f"Overall: **{port.get('overall')}**", "",
             "| fact | value |", "|---|---|",
             *(f"| {k} | {_cell(str(v) if v not in ([], None) else 'none')} |"
               for k, v in sorted(model.items())),
             f"| backend | {_cell(_backend(manifest.get('model') or {}))} |",
             f"| integration path | {_cell(path.get('path', '-'))}"
             f"{_cell(' (' + path['reason'] + ')') if path.get('reason') else ''} |",
             f"| image | {_cell(service.get('image', '-'))} ({_cell(pinned)}) |",
             f"| eager mode | {'on: ' + _cell(eager.get('blocker', '')) if eager else 'off'} |",
             f"| platforms | {_cell(', '.join(port.get('platforms') or []) or '-')} |", "",
             "| smoke row | modality | verdict | answer | problems |", "|---|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['modality']} | {'PASS' if r['passed'] else 'FAIL'} | "
              f"{_cell(r['answer'][:120])} | {_cell('; '.join(r['problems']) or '-')} |"
              for r in port.get("smoke") or []]
    lines += ["", f"Accuracy: {accuracy.get('correct')}/{accuracy.get('total')} (minimum "
              f"{accuracy.get('minimum')}). Requests: {perf.get('requests')}, median latency "
              f"{perf.get('latencyMsMedian')} ms, {perf.get('completionTokensPerSecond')} "
              "completion tokens/s.", ""]
    blockers = port.get("blockers") or []
    lines += ["Blockers: " + ("; ".join(_cell(b) for b in blockers) if blockers else "none"),
              "", f"Next bounded step: {_cell(str(port.get('nextStep')))}"]
    return lines


def _backend(model: dict[str, Any]) -> str:
    """The template's model backend as its spec names it (``use``, or the preset it expands)."""
    if model.get("use"):
        return str(model["use"])
    return f"preset {model['preset']}" if model.get("preset") else "-"


def _memory(evidence: Evidence, run: str) -> tuple[bytes | None, list[str]]:
    telemetry = _load(evidence, "evidence/telemetry.json")
    if not telemetry:
        return None, []
    readings = (telemetry.get("series") or {}).get("readings") or []
    series: dict[str, list[tuple[float, int]]] = {}
    for reading in readings:
        for uuid, (memory, _util) in (reading.get("gpus") or {}).items():
            series.setdefault(uuid, []).append((float(reading["at"]), int(memory)))
    window = telemetry.get("window")
    why = window if isinstance(window, str) else ""
    lines = ["## GPU telemetry", "", f"Source: {telemetry.get('source') or 'none'}; during the "
             f"run: {why or f'{len(readings)} reading(s)'}."]
    return plots.gpu_memory(series, f"{run}: GPU memory", why), lines


def write(evidence: Evidence, result: str, reason: str) -> list[str]:
    """Draw the plots and write ``report.md``; the files written (relative to the bundle)."""
    manifest = _load(evidence, "manifest.json")
    spec = manifest.get("spec") or {}
    run = evidence.folder.name
    lines = [f"# Run {run}: {result}", "", *([_cell(reason), ""] if reason else []),
             f"Experiment type: {spec.get('type', '?')}; claim: "
             f"{_cell(str((spec.get('measurement') or {}).get('claim', '-')))}", "",
             "## Gates", "", "| gate | verdict | reason |", "|---|---|---|"]
    lines += [f"| {g.name} | {'PASS' if g.passed else 'FAIL'} | {_cell(g.reason)} |"
              for g in evidence.gates().values()]
    lines += ["", *more] if (more := _port(evidence, manifest)) else []
    written: list[str] = []
    figures: list[str] = []
    for relative, (png, more), caption in (
            (LATENCY_PNG, _safe(lambda: _latency(evidence, run, spec)), "Chunk latency"),
            (MEMORY_PNG, _safe(lambda: _memory(evidence, run)), "GPU memory")):
        lines += ["", *more] if more else []
        if isinstance(png, bytes):
            evidence.write_bytes(relative, png)
            written.append(relative)
            figures.append(f"![{caption}]({relative})")
        elif isinstance(png, str):
            figures.append(f"{caption}: not drawn ({png})")
    if figures:
        lines += ["", "## Plots", "", *(f"{f}\n" for f in figures)]
    evidence.write_text(REPORT, "\n".join(lines).rstrip() + "\n")
    return [*written, REPORT]


def _safe(draw: Callable[[], tuple[bytes | None, list[str]]]
          ) -> tuple[bytes | str | None, list[str]]:
    """A plot that fails says why in the report instead of failing the run's end."""
    try:
        return draw()
    except Exception as exc:  # any drawing failure is reported, never raised
        return f"{type(exc).__name__}: {exc}", []


def _cell(text: str) -> str:
    """One Markdown table cell or line: no line breaks, no column separators."""
    return " ".join(str(text).split()).replace("|", "\\|")
