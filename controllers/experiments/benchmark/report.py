"""The benchmark's section of ``report.md``: the harness's handles and verdict, and a file
burst's levels, plotted (see ``reportparts``)."""

from __future__ import annotations

from controllers.experiments import plots
from controllers.experiments.reportparts import Section, cell, load_json
from state.evidence import Evidence

BENCH_FILE = "evidence/benchmark.json"


def section(evidence: Evidence) -> Section:
    bench = load_json(evidence, BENCH_FILE)
    if not bench:
        return Section()
    handles = bench.get("handles") or {}
    lines = ["## Benchmark", "",
             f"Scenario {bench.get('scenario')} ({bench.get('mode')}, "
             f"{bench.get('startPolicy')} start, {bench.get('apiMode')}, "
             f"{'EVS' if bench.get('evs') else 'non-EVS baseline'}): "
             f"{'accepted' if bench.get('accepted') else 'not accepted'}; exit code "
             f"{bench.get('exitCode')}; input tokens per chunk {bench.get('promptTokens')}.",
             "",
             *(f"- {k.upper()}: `{cell(v)}`" for k, v in sorted(handles.items()))]
    lines += [f"- problem: {cell(p)}" for p in bench.get("problems") or []]
    if bench.get("staleLog"):
        lines.append(f"- the log was quiet {len(bench['staleLog'])} time(s): inspected, not "
                     "stopped")
    for case in bench.get("maxLiveStreams") or []:
        lines.append(f"- {cell(case.get('test_case_id'))}: max sustainable streams "
                     f"{case.get('max_sustainable_streams')}, first unstable "
                     f"{case.get('first_unstable_stream_count')}, last stable p95 "
                     f"{case.get('last_stable_p95')} s")
    pair = bench.get("pairing")
    if isinstance(pair, dict):
        lines.append(f"- pairing with {pair.get('other')}: {cell(pair.get('reason'))}")
    burst = bench.get("fileBurst")
    if not isinstance(burst, dict):
        return Section(lines)
    levels = burst.get("levels") or []
    lines += ["", "| concurrency | status | p95 (ms) | p99 (ms) | error |", "|---|---|---|---|---|"]
    lines += [f"| {lv.get('concurrency')} | {lv.get('status')} | {lv.get('p95_ms')} | "
              f"{lv.get('p99_ms')} | {cell(lv.get('error') or '-')} |" for lv in levels]
    lines += ["", f"Last clean level: {burst.get('lastClean')}; first failure: "
              f"{cell(burst.get('firstFailure'))}"]
    points = [plots.LatencyPoint(int(lv.get("concurrency") or 0), None, lv.get("p95_ms"),
                                 lv.get("p99_ms"), "unstable" if lv.get("status") != "PASS"
                                 else "stable") for lv in levels]
    png = plots.latency_by_streams(
        points, f"{evidence.folder.name}: file-burst latency per concurrency level",
        xlabel="concurrent file requests")
    return Section(lines, png)
