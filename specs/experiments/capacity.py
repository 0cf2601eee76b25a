"""``type: capacity``: the highest stable and first unstable count of independent live streams
(``rules.md``, capacity), by our own stability windows or by the VSS harness's search."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from specs.experiments.base import R_CONTRACT, CanaryPublisher, ExperimentSpecBase, PinnedClip
from specs.experiments.harness import SCENARIO_PATTERN, HarnessSpec
from specs.models import Strict
from specs.rules import Finding

R_CAPACITY = "Experiment rule: capacity"


class HarnessSearch(Strict):
    """``capacity.harness``: hand the search to the VSS harness's ``max_live_streams`` scenario
    (its windows, its latency threshold, its bisection), seeded by the capacity's
    ``initialStreamCount`` and ``addStreamCount``, so its boundary can be compared with ours on
    the same service. The harness runs as a ``type: benchmark`` run runs it."""

    harness: HarnessSpec
    scenario: str = Field(pattern=SCENARIO_PATTERN)  # a max_live_streams scenario
    binarySearchRefinement: bool | None = None  # unset: the scenario's own
    logStaleSeconds: int = Field(default=600, ge=5, le=86400)  # then inspect, never kill
    smokeClip: PinnedClip | None = None  # the smoke request's video, when the run smokes


class CapacitySpec(Strict):
    """The capacity search (``type: capacity``): the highest stable and first unstable count of
    independent live streams. Seeded as the VSS harness takes it (``initialStreamCount``,
    ``addStreamCount``); every count is judged by one stability window of ``windowSeconds``
    on a fresh service (unless ``serviceReuse`` freezes reuse into the experiment) against the
    success criteria: at least ``minSuccessRate`` of the streams complete, p95 chunk latency
    at most ``maxP95LatencyMs``, no dropped chunk, zero residue after the window."""

    initialStreamCount: int = Field(ge=1, le=1024)
    addStreamCount: int = Field(default=1, ge=1, le=256)
    maxStreamCount: int = Field(ge=1, le=1024)
    windowSeconds: int = Field(default=60, ge=5, le=3600)
    maxP95LatencyMs: float = Field(ge=1, le=3_600_000)  # a millisecond at the least
    minSuccessRate: float = Field(default=1.0, ge=0.01, le=1)
    serviceReuse: bool = False
    chunkDurationSeconds: int = Field(default=2, ge=1, le=60)
    maxTokens: int = Field(default=16, ge=1, le=16384)
    publisher: CanaryPublisher = Field(default_factory=CanaryPublisher)
    # The smoke request before the first window: always (true), or only where the contract
    # requires it (unset: a budget of 30 minutes or more; false is refused there).
    smoke: bool | None = None
    harness: HarnessSearch | None = None  # the VSS harness searches instead of our windows


class CapacityExperimentSpec(ExperimentSpecBase):
    type: Literal["capacity"]
    capacity: CapacitySpec

    def largest_level(self) -> int:
        return self.capacity.maxStreamCount

    def smokes(self) -> bool:
        return self.budget_smokes(self.capacity.smoke)

    def least_measuring(self) -> tuple[float, tuple[str, ...], str] | None:
        if self.capacity.harness is not None:
            return None  # the harness's windows are its scenario's, not ours
        return (self.capacity.windowSeconds, ("capacity", "windowSeconds"),
                "one stability window")

    def single_waits(self) -> list[tuple[float, tuple[str, ...], str]]:
        search = self.capacity.harness
        return [] if search is None or "logStaleSeconds" not in search.model_fields_set else [
            (float(search.logStaleSeconds), ("capacity", "harness", "logStaleSeconds"),
             "the silence before the harness log is inspected")]

    def type_findings(self) -> Iterator[Finding]:
        cap = self.capacity
        if cap.harness is None and cap.chunkDurationSeconds > cap.windowSeconds:
            yield Finding(("capacity", "chunkDurationSeconds"), f"a chunk of "
                          f"{cap.chunkDurationSeconds}s is longer than the {cap.windowSeconds}s "
                          "window that judges it: no chunk would complete in a window",
                          R_CAPACITY)
        if cap.initialStreamCount > cap.maxStreamCount:
            yield Finding(("capacity", "initialStreamCount"), f"{cap.initialStreamCount} is "
                          f"above maxStreamCount {cap.maxStreamCount}", R_CAPACITY)
        if self.workload.loadUnit != "independent_live_stream":
            yield Finding(("workload", "loadUnit"), "a capacity search counts independent live "
                          "streams (independent_live_stream)", R_CAPACITY)
        measure = self.measurement
        if measure.repetitions != 1 or measure.warmupRuns:
            yield Finding(("measurement", "repetitions"), "a capacity search judges each count "
                          "by one stability window: set repetitions 1 and warmupRuns 0 (a longer "
                          "windowSeconds measures longer)", R_CAPACITY)
        yield from self.smoke_refused("capacity", cap.smoke)
        if cap.harness is None:
            return
        if cap.serviceReuse:
            yield Finding(("capacity", "serviceReuse"), "the harness runs its windows on one "
                          "service: serviceReuse belongs to our own search", R_CAPACITY)
        if self.smokes() and cap.harness.smokeClip is None:
            yield Finding(("capacity", "harness", "smokeClip"), "the run smokes first (a budget "
                          "of 30 minutes or more, or smoke: true): name the pinned clip of its "
                          "1-frame, 1-token request", R_CONTRACT)

