"""One side of a qualification as its canary's evidence says: what the decision compares.

Read from the files the side's canary wrote (``runs/<side>/`` of the qualification run), never
from memory, so a report written after a restart reads the same numbers: the per-chunk
latencies of every measured repetition (warm-up runs left out, as the canary's own p95 leaves
them out), the dropped chunks its performance gate counted, and whether its streams' answers
were their own (the semantic-isolation evidence: a wrong answer breaks it, missing ones only
leave it unjudged), and, with a capacity gate, the highest stable count its search found.
"""

from __future__ import annotations

import json
from dataclasses import fields

from controllers.kinds.experiments.canary.runtype import (
    GATE_ISOLATION,
    ISOLATION_FILE,
    PERFORMANCE_FILE,
    CanaryPerformance,
    IsolationDocument,
)
from controllers.kinds.experiments.isolation import judge_answer
from controllers.kinds.experiments.ledger import answered, chunk_latency
from controllers.kinds.experiments.promotion.capacity import capacity_of
from controllers.kinds.experiments.promotion.gates import Measured
from controllers.kinds.streamset.caption_events import CaptionChunk
from specs.experiments.base import LatencySource
from state.evidence import Evidence

CHUNK_FIELDS = frozenset(f.name for f in fields(CaptionChunk))


def samples_file(repetition: int) -> str:
    """Where the canary keeps repetition ``repetition``'s chunks (warm-ups counted)."""
    return f"evidence/captions/perf{repetition}.jsonl"


def side_measured(side: Evidence, warmups: int, repetitions: int,
                  source: LatencySource) -> Measured:
    """``side``'s measurements (None or empty where its canary did not get to measure)."""
    latencies: list[float] = []
    for rep in range(warmups, warmups + repetitions):
        latencies += _latencies(side, samples_file(rep), source)
    performance = side.read(PERFORMANCE_FILE, CanaryPerformance)
    return Measured(chunk_latencies_ms=latencies, capacity=capacity_of(side),
                    dropped_chunks=None if performance is None else performance.droppedChunks,
                    isolated=_isolated(side))


def _isolated(side: Evidence) -> bool | None:
    """False when a stream answered with another's content (what a release that mixes
    streams' answers does); True when every stream gave its own answers; None when answers
    were missing and none was wrong: too few to judge (a source that sent no frames fails both
    sides alike, and says nothing about either service)."""
    gate = side.gates().get(GATE_ISOLATION)
    document = side.read(ISOLATION_FILE, IsolationDocument)
    if gate is None or document is None:
        return None
    if gate.passed:
        return True
    labels = [v.label for v in document.verdicts]
    wrong = any(judge_answer(answer, v.label, labels) is not None
                for v in document.verdicts for answer in v.answers)
    return False if wrong else None


def _latencies(side: Evidence, relative: str, source: LatencySource) -> list[float]:
    """The latency of every answered chunk in one samples file (a line that does not read as
    a chunk is skipped: the file is evidence, written by us, but never trusted to parse)."""
    try:
        text = side.path(relative).read_text("utf-8")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
            chunk = CaptionChunk(**{k: v for k, v in data.items() if k in CHUNK_FIELDS})
            if not answered(chunk):
                continue  # not an answer: counted by the ledger, not a latency
            latency = chunk_latency(chunk, source)
        except (ValueError, TypeError, AttributeError):
            continue
        if latency is not None:
            found.append(float(latency))
    return found
