"""The benchmark's evidence document and its section of ``report.md``: the harness's handles
and verdict, and a file burst's levels, plotted (see ``reportparts``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from controllers.kinds.experiments import plots
from controllers.kinds.experiments.benchmark.harnessreport import FileBurst
from controllers.kinds.experiments.reportparts import Section, cell
from state.evidence import Document, Evidence

BENCH_FILE = "evidence/benchmark.json"


class Pairing(Document):
    """An EVS pair judged: the other side's run, and the input tokens per chunk of each."""

    passed: bool
    reason: str
    other: str
    promptTokens: float | None = None
    otherPromptTokens: float | None = None


class StaleLog(Document):
    """One inspection of a harness whose log went quiet (it is never stopped for it)."""

    logQuietSeconds: float
    harnessRunning: bool
    serviceModel: str | None = None
    streamsListed: int | None = None
    serviceError: str | None = None


class BenchDocument(Document):
    """``evidence/benchmark.json``. What the harness wrote itself (its output document, its
    execution summary, its max_live_streams test cases) is kept in its own format."""

    scenario: str
    mode: str
    startPolicy: str = "synchronized"
    apiMode: str | None = None
    evs: bool = False
    handles: dict[str, str] = Field(default_factory=dict)  # where the harness ran
    # The same, relative to the bundle: what they are wherever the bundle lies (a job's were
    # paths in the job, on its Host).
    handlesInBundle: dict[str, str] = Field(default_factory=dict)
    exitCode: int | None = None
    accepted: bool = False
    problems: list[str] = Field(default_factory=list)
    promptTokens: float | None = None
    fileBurst: FileBurst | None = None
    staleLog: list[StaleLog] = Field(default_factory=list)  # each inspection of a quiet log
    maxLiveStreams: list[dict[str, Any]] | None = None
    executionSummary: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None
    pairing: Pairing | None = None


def section(evidence: Evidence) -> Section:
    bench = evidence.read(BENCH_FILE, BenchDocument)
    if bench is None:
        return Section()
    lines = ["## Benchmark", "",
             f"Scenario {bench.scenario} ({bench.mode}, {bench.startPolicy} start, "
             f"{bench.apiMode}, {'EVS' if bench.evs else 'non-EVS baseline'}): "
             f"{'accepted' if bench.accepted else 'not accepted'}; exit code "
             f"{bench.exitCode}; input tokens per chunk {bench.promptTokens}.",
             "",
             *(f"- {k.upper()}: `{cell(v)}`" + (f" (in the bundle: `{cell(inside)}`)"
                                                  if (inside := bench.handlesInBundle.get(k))
                                                  else "")
               for k, v in sorted(bench.handles.items()))]
    lines += [f"- problem: {cell(p)}" for p in bench.problems]
    if bench.staleLog:
        lines.append(f"- the log was quiet {len(bench.staleLog)} time(s): inspected, not "
                     "stopped")
    for case in bench.maxLiveStreams or []:
        lines.append(f"- {cell(case.get('test_case_id'))}: max sustainable streams "
                     f"{case.get('max_sustainable_streams')}, first unstable "
                     f"{case.get('first_unstable_stream_count')}, last stable p95 "
                     f"{case.get('last_stable_p95')} s")
    if bench.pairing is not None:
        lines.append(f"- pairing with {bench.pairing.other}: {cell(bench.pairing.reason)}")
    burst = bench.fileBurst
    if burst is None:
        return Section(lines)
    lines += ["", "| concurrency | status | p95 (ms) | p99 (ms) | error |", "|---|---|---|---|---|"]
    lines += [f"| {lv.concurrency} | {lv.status} | {lv.p95_ms} | {lv.p99_ms} | "
              f"{cell(lv.error or '-')} |" for lv in burst.levels]
    clean = burst.lastClean.model_dump() if burst.lastClean is not None else None
    failure = burst.firstFailure.model_dump() if burst.firstFailure is not None else None
    lines += ["", f"Last clean level: {clean}; first failure: {cell(failure)}"]
    points = [plots.LatencyPoint(lv.concurrency, None, lv.p95_ms, lv.p99_ms,
                                 "unstable" if lv.status != "PASS" else "stable")
              for lv in burst.levels]
    png = plots.latency_by_streams(
        points, f"{evidence.folder.name}: file-burst latency per concurrency level",
        xlabel="concurrent file requests")
    return Section(lines, png)
