"""``type: benchmark``: one scenario of the VSS perf harness, run and supervised as it is
(``vss-harness.md``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field

from specs.experiments.base import R_CONTRACT, RUN_ID_PATTERN, ExperimentSpecBase, PinnedClip
from specs.experiments.harness import LEVEL_MODES, SCENARIO_PATTERN, HarnessMode, HarnessSpec
from specs.models import Strict
from specs.rules import Finding

R_BENCH = "Experiment rule: benchmark"


class BenchmarkSpec(Strict):
    """``type: benchmark``: one scenario of the VSS harness, supervised. The mode and start
    policy are frozen with the run (stream counts are never compared across modes)."""

    harness: HarnessSpec
    scenario: str = Field(pattern=SCENARIO_PATTERN)
    mode: HarnessMode  # the scenario's benchmark_mode, as the harness lists it
    startPolicy: Literal["synchronized", "staggered"] = "synchronized"
    apiMode: Literal["generate_captions", "chat_completions"] | None = None  # None: the config's
    initialStreamCount: int | None = Field(default=None, ge=1, le=4096)
    addStreamCount: int | None = Field(default=None, ge=1, le=1024)
    binarySearchRefinement: bool | None = None
    concurrencyLevels: list[Annotated[int, Field(ge=1, le=4096)]] = Field(default_factory=list,
                                                                           max_length=32)
    logStaleSeconds: int = Field(default=600, ge=5, le=86400)  # then inspect, never kill
    evs: bool = False  # this run is the EVS side (True) or the non-EVS baseline
    pairWith: str | None = Field(default=None, pattern=RUN_ID_PATTERN)  # the other side's run
    smoke: bool | None = None  # unset: required for budgets of 30 minutes or more
    smokeClip: PinnedClip | None = None  # the 1-frame, 1-token smoke request's video
    smokeTimeoutSeconds: float = Field(default=60, ge=1, le=3600)  # longer: it hangs



class BenchmarkExperimentSpec(ExperimentSpecBase):
    type: Literal["benchmark"]
    benchmark: BenchmarkSpec

    def smokes(self) -> bool:
        return self.budget_smokes(self.benchmark.smoke)

    def read_runs(self) -> list[str]:
        return [self.benchmark.pairWith] if self.benchmark.pairWith else []

    def single_waits(self) -> list[tuple[float, tuple[str, ...], str]]:
        bench = self.benchmark
        waits: list[tuple[float, tuple[str, ...], str]] = []
        if "logStaleSeconds" in bench.model_fields_set:
            waits.append((float(bench.logStaleSeconds), ("benchmark", "logStaleSeconds"),
                          "the silence before the harness log is inspected"))
        if self.smokes() and "smokeTimeoutSeconds" in bench.model_fields_set:
            waits.append((bench.smokeTimeoutSeconds, ("benchmark", "smokeTimeoutSeconds"),
                          "the smoke request's timeout"))
        return waits

    def type_findings(self) -> Iterator[Finding]:
        bench = self.benchmark
        if bench.pairWith == self.runId:
            yield Finding(("benchmark", "pairWith"), "a run cannot be paired with itself",
                          R_BENCH)
        if bench.concurrencyLevels and bench.mode not in LEVEL_MODES:
            yield Finding(("benchmark", "concurrencyLevels"), f"the harness ignores concurrency "
                          f"levels in {bench.mode}: they belong to {', '.join(LEVEL_MODES)}",
                          R_BENCH)
        seeds = (bench.initialStreamCount, bench.addStreamCount, bench.binarySearchRefinement)
        if any(v is not None for v in seeds) and bench.mode != "max_live_streams":
            yield Finding(("benchmark", "initialStreamCount"), "stream-count seeds and binary "
                          "search refinement belong to max_live_streams", R_BENCH)
        if self.smokes() and bench.smokeClip is None:
            yield Finding(("benchmark", "smokeClip"), "the run smokes first (a budget of 30 "
                          "minutes or more, or smoke: true): name the pinned clip of its 1-frame, "
                          "1-token request", R_CONTRACT)
        yield from self.smoke_refused("benchmark", bench.smoke)

