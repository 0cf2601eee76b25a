"""A capacity search's evidence documents: ``evidence/capacity.json`` (the boundary and the
ledger of windows) and one file per stability window. Written by our search
(``runtype``) or by the harness's (``harness``), read back by the report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from controllers.kinds.experiments.capacity.search import Window
from controllers.kinds.experiments.cleanup import CleanupEvidence
from controllers.kinds.experiments.ledger import PerformanceReport
from state.evidence import Document

CAPACITY_FILE = "evidence/capacity.json"


class WindowRow(Document):
    """One window as the ledger keeps it (``search.Window``)."""

    streams: int
    verdict: str
    p95_ms: float | None = None
    reason: str = ""
    attempt: str = ""

    @classmethod
    def of(cls, window: Window) -> WindowRow:
        return cls(streams=window.streams, verdict=window.verdict.value,
                   p95_ms=window.p95_ms, reason=window.reason, attempt=window.attempt)


class LedgerRow(WindowRow):
    """A window in ``capacity.json``'s ledger, with the file that holds its detail."""

    file: str | None = None


class WindowDetail(Document):
    """What a window adds to its row in its own file (nothing, for one that never ran)."""

    seconds: float | None = None
    freshWaitSeconds: float | None = None
    sources: dict[str, str] = Field(default_factory=dict)  # name → URL
    residue: CleanupEvidence | None = None  # the zero-residue proof after the window
    # The run's GPUs once the window's service is gone (MiB per GPU), or why not measured;
    # unset where the service is reused (it holds its memory between windows).
    gpuMemory: dict[str, int] | str | None = None
    report: PerformanceReport | None = None
    captions: str | None = None  # the captions file


class WindowDocument(WindowRow, WindowDetail):
    """``evidence/capacity/<attempt>/wNN-<count>.json``: one stability window in full."""

    windowSeconds: int


class Criteria(Document):
    windowSeconds: int | None = None
    maxP95LatencyMs: float | None = None
    minSuccessRate: float | None = None
    droppedChunks: int | None = None
    residue: int | None = None
    serviceReuse: bool | None = None
    harnessLatencyThresholdSeconds: float | None = None


class Seed(Document):
    initialStreamCount: int
    addStreamCount: int
    maxStreamCount: int


class HarnessRef(Document):
    """The harness's search: its scenario, where it wrote, and its test cases as it wrote
    them (its format, not ours)."""

    scenario: str
    handles: dict[str, str] = Field(default_factory=dict)
    testCases: list[dict[str, Any]] = Field(default_factory=list)


class HarnessWindow(Document):
    """One latency snapshot of the harness's search, with the verdict its boundary implies."""

    streams: int
    verdict: str
    p95_ms: float | None = None


class CapacityDocument(Document):
    """``evidence/capacity.json``."""

    searchedBy: Literal["reconciler", "harness"] = "reconciler"
    highestStable: int | None = None
    firstUnstable: int | None = None
    found: bool = False
    inconclusive: str | None = None
    criteria: Criteria = Field(default_factory=Criteria)
    seed: Seed | None = None
    attempts: list[str] = Field(default_factory=list)
    windowsUsed: int | None = None
    ledger: list[LedgerRow] = Field(default_factory=list)
    harness: HarnessRef | None = None  # searchedBy harness
    windows: list[HarnessWindow] = Field(default_factory=list)  # searchedBy harness
