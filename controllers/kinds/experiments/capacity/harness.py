"""``type: capacity`` with ``capacity.harness``: the search handed to the VSS harness.

The same Experiment (its template, fresh service, seeds, budget and cleanup proof), but the
windows are the harness's own ``max_live_streams`` scenario, run and supervised as a benchmark
is (``benchmark.Benchmark``: the scenario gate, the three handles, the stale-log inspection,
the harness's acceptance), and the boundary is read from its ``max_live_streams_results.json``
(``max_sustainable_streams``, ``first_unstable_stream_count``). A user can run the same service
through both searches and compare: ``evidence/capacity.json`` says which one searched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controllers.kinds.experiments.benchmark import harnessreport
from controllers.kinds.experiments.benchmark.runtype import Benchmark
from controllers.kinds.experiments.capacity.documents import (
    CAPACITY_FILE,
    CapacityDocument,
    Criteria,
    HarnessRef,
    HarnessWindow,
    Seed,
)
from controllers.kinds.experiments.runtype import RunContext
from specs.experiments.base import ExperimentSpecBase
from specs.experiments.benchmark import BenchmarkSpec
from specs.experiments.capacity import CapacitySpec
from state.evidence import Verdict

GATE_BOUNDARY = "capacity-boundary"


def _count(value: object) -> int | None:
    """A stream count the harness reported (its file, its types: anything else is none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_benchmark(cap: CapacitySpec) -> BenchmarkSpec:
    """The harness scenario the capacity search runs, seeded as the Experiment says."""
    search = cap.harness
    assert search is not None
    return BenchmarkSpec(harness=search.harness, scenario=search.scenario,
                         mode="max_live_streams", initialStreamCount=cap.initialStreamCount,
                         addStreamCount=cap.addStreamCount,
                         binarySearchRefinement=search.binarySearchRefinement,
                         logStaleSeconds=search.logStaleSeconds, smoke=cap.smoke,
                         smokeClip=search.smokeClip)


def search(ctx: RunContext[ExperimentSpecBase], cap: CapacitySpec) -> tuple[Verdict, str]:
    runner = Benchmark(ctx, as_benchmark(cap))
    problem = runner.check_scenario()
    if problem:
        return "FAIL", f"scenario: {problem}"
    service = ctx.start_service()
    if ctx.spec.smokes():
        problems = runner.smoke(service)
        if problems:
            return "FAIL", f"smoke: {'; '.join(problems)}"
    outcome, handles = runner.run_harness(service)
    result, reason = runner.judge(outcome, handles)
    cases = harnessreport.max_live_streams(Path(handles["report"]) / runner.bench.scenario)
    case: dict[str, Any] = cases[0] if cases else {}
    highest = case.get("max_sustainable_streams")
    first = case.get("first_unstable_stream_count")
    # The harness leaves first_unstable_stream_count at 0 when its ramp ended without finding
    # one (its cap, an interrupt): no boundary then.
    found = (result == "PASS" and isinstance(highest, int) and highest > 0
             and isinstance(first, int) and first > highest)
    if found:
        said = (f"highest stable {highest}, first unstable {first} stream(s), searched by the "
                f"VSS harness ({case.get('test_case_id')})")
    elif result != "PASS":
        said = f"the harness's search was not accepted: {reason}"
    else:
        said = (f"the harness found no boundary: max_sustainable_streams {highest}, first "
                f"unstable {first}")
    threshold = case.get("latency_threshold_seconds")
    ctx.evidence.write(CAPACITY_FILE, CapacityDocument(
        searchedBy="harness", highestStable=_count(highest), firstUnstable=_count(first),
        found=found, inconclusive=None if found else said,
        seed=Seed(initialStreamCount=cap.initialStreamCount,
                  addStreamCount=cap.addStreamCount, maxStreamCount=cap.maxStreamCount),
        criteria=Criteria(maxP95LatencyMs=cap.maxP95LatencyMs,
                          harnessLatencyThresholdSeconds=threshold
                          if isinstance(threshold, int | float) else None),
        harness=HarnessRef(scenario=runner.bench.scenario, handles=handles, testCases=cases),
        windows=harness_windows(Path(handles["report"]) / runner.bench.scenario,
                                _count(highest), first if found else None),
        attempts=["harness"]))
    ctx.evidence.gate(GATE_BOUNDARY, found, said, {
        "file": CAPACITY_FILE, "highestStable": highest, "firstUnstable": first,
        "searchedBy": "harness"})
    if found:
        return "PASS", said
    return ("FAIL" if result == "FAIL" else "INCONCLUSIVE"), said


def harness_windows(scenario_dir: Path, highest: int | None,
                    first: int | None) -> list[HarnessWindow]:
    """The harness's latency snapshots (one per stream count it held): streams, p95 in ms, and
    the verdict its boundary implies (stable at or below the highest stable count, unstable
    from the first unstable one; its snapshots carry no verdict of their own), for the report's
    plot."""
    rows = []
    for path in sorted(scenario_dir.glob("*/max_live_streams_results.json")):
        data = harnessreport.load(path) or {}
        for snap in data.get("latency_snapshots") or []:
            if not isinstance(snap, dict) or not isinstance(snap.get("stream_count"), int):
                continue
            p95, streams = snap.get("p95_latency"), snap["stream_count"]
            verdict = ("stable" if highest is not None and streams <= highest else
                       "unstable" if first is not None and streams >= first else "-")
            rows.append(HarnessWindow(streams=streams, verdict=verdict,
                                      p95_ms=round(p95 * 1000, 3)
                                      if isinstance(p95, int | float) else None))
    return rows
