"""``type: canary``: N independent live streams, an optional semantic-isolation gate, then the
performance part (``rules.md``, canary)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from specs.experiments.base import R_CONTRACT, SMOKE_FROM_S, CanaryPublisher, ExperimentSpecBase
from specs.models import SHA256_PATTERN, AbsolutePath, Strict
from specs.rules import Finding
from specs.trust import reads

LABEL_PATTERN = r"^[a-z][a-z0-9]*( [a-z][a-z0-9]*)*$"  # lowercase words: what a caption says
SOLID_COLOURS = ("RED", "GREEN", "BLUE", "YELLOW", "CYAN", "MAGENTA", "WHITE", "ORANGE")
R_CANARY = "Experiment rule: canary"


class CanaryMedia(Strict):
    """A checksum-pinned object image or clip for one canary stream, with the label a correct
    answer names (object recognition instead of colours)."""

    label: str = Field(pattern=LABEL_PATTERN, max_length=64)
    path: AbsolutePath = reads("media")
    sha256: str = Field(pattern=SHA256_PATTERN)



class CanarySpec(Strict):
    """The canary: N independent live streams, an optional semantic-isolation gate, then the
    performance part (per-chunk latency, dropped chunks, the ledger of units)."""

    streams: Literal[1, 2, 4, 8, 16, 32]
    semanticIsolation: bool = True
    qualificationOnly: bool = False  # PASS after the isolation gate, no performance part
    # one per stream; required at 32
    media: list[CanaryMedia] = Field(default_factory=list, max_length=32)
    answersPerSource: int = Field(default=3, ge=3, le=20)  # source-correct answers required
    chunkDurationSeconds: int = Field(default=2, ge=1, le=60)
    maxTokens: int = Field(default=16, ge=1, le=16384)
    performanceSeconds: int = Field(default=30, ge=5, le=86400)  # per repetition
    freshFrameSeconds: float = Field(default=15, ge=0.1, le=600)  # coverage per source
    # FAIL above (None: record only)
    maxP95LatencyMs: float | None = Field(default=None, ge=1, le=3_600_000)
    publisher: CanaryPublisher = Field(default_factory=CanaryPublisher)
    # The 1-frame, 1-token smoke request before the performance part: always (true), or only
    # where the contract requires it (unset: runs of 30 minutes or more; false is refused there).
    smoke: bool | None = None



class CanaryExperimentSpec(ExperimentSpecBase):
    type: Literal["canary"]
    canary: CanarySpec

    def largest_level(self) -> int:
        return self.canary.streams

    def performance_seconds(self) -> int:
        """How long the performance part captions, warm-up included (0 without one)."""
        if self.canary.qualificationOnly:
            return 0
        runs = self.measurement.warmupRuns + self.measurement.repetitions
        return runs * self.canary.performanceSeconds

    def least_measuring(self) -> tuple[float, tuple[str, ...], str] | None:
        seconds = self.performance_seconds()
        return (seconds, ("canary", "performanceSeconds"),
                "the performance part (warm-up and repetitions)") if seconds else None

    def needs_smoke(self) -> bool:
        return self.performance_seconds() >= SMOKE_FROM_S

    def smokes(self) -> bool:
        canary = self.canary
        if canary.qualificationOnly:
            return False
        return canary.smoke is True or (canary.smoke is None and self.needs_smoke())

    def type_findings(self) -> Iterator[Finding]:
        canary = self.canary
        if self.performance_seconds() and canary.chunkDurationSeconds > canary.performanceSeconds:
            yield Finding(("canary", "chunkDurationSeconds"), f"a chunk of "
                          f"{canary.chunkDurationSeconds}s is longer than the "
                          f"{canary.performanceSeconds}s a repetition measures: no chunk would "
                          "complete in it", R_CANARY)
        if self.workload.loadUnit != "independent_live_stream":
            yield Finding(("workload", "loadUnit"), "a canary's streams are independent live "
                          "streams (independent_live_stream)", R_CANARY)
        if canary.media and len(canary.media) != canary.streams:
            yield Finding(("canary", "media"), f"{len(canary.media)} media entries for "
                          f"{canary.streams} streams: give one per stream", R_CANARY)
        if canary.streams == 32 and not canary.media:
            yield Finding(("canary", "streams"), "32 streams need checksum-pinned object media "
                          "(canary.media, one per stream); synthetic colours stop at 16", R_CANARY)
        yield from media_labels([m.label for m in canary.media])
        if not canary.semanticIsolation and canary.streams >= 2:
            yield Finding(("canary", "semanticIsolation"), f"{canary.streams} streams need the "
                          "semantic-isolation gate: streams that answer for each other make every "
                          "number after it meaningless", R_CANARY)
        if canary.semanticIsolation and canary.streams < 2:
            yield Finding(("canary", "semanticIsolation"), "semantic isolation needs 2 or more "
                          "streams", R_CANARY)
        if canary.smoke is False and self.needs_smoke():
            yield Finding(("canary", "smoke"), f"a performance part of "
                          f"{self.performance_seconds()}s (30 minutes or more) must pass the "
                          "1-frame, 1-token smoke request first", R_CONTRACT)
        if canary.qualificationOnly and not canary.semanticIsolation:
            yield Finding(("canary", "qualificationOnly"), "qualificationOnly stops after the "
                          "semantic-isolation gate: turn semanticIsolation on", R_CANARY)


def media_labels(labels: list[str]) -> Iterator[Finding]:
    """Every canary source needs its own answer: no label twice, none inside another."""
    for i, label in enumerate(labels):
        if label in labels[:i]:
            yield Finding(("canary", "media", i, "label"), f"label {label!r} is used twice: "
                          "every source needs its own answer", R_CANARY)
        words = set(label.split())
        clash = next((o for o in labels if o != label and set(o.split()) >= words), None)
        if clash is not None:
            yield Finding(("canary", "media", i, "label"), f"every word of {label!r} is also in "
                          f"{clash!r}: an answer for one would count for the other", R_CANARY)


def solid_labels(streams: int) -> list[str]:
    """The probe labels of synthetic canary sources: one colour each up to 8; at 16 every
    colour twice, once SOLID and once with a contrasting BORDER."""
    if streams <= len(SOLID_COLOURS):
        return [c.lower() for c in SOLID_COLOURS[:streams]]
    return [f"{c.lower()} {style}" for c in SOLID_COLOURS for style in ("solid", "border")]

