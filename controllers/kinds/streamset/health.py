"""Whether a StreamSet's sources are healthy: fresh frames, and captions when captioning.

Why apart from the controller: "Ready" for a live source is a judgement over measurements
(a decoded frame now, the age of the last caption that came from real frames), and it must name
each source that fails and why -- that is what Degraded reports and `status` shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from controllers.errors import TemporaryError
from controllers.kinds.streamset.captions import CaptionState
from controllers.kinds.streamset.facts import SourceFacts
from state.models import ResourceStatus


class SourcesDegraded(TemporaryError):
    """Some sources have no fresh frames (or captions); the message names them."""

    def __init__(self, message: str, sources: list[str]) -> None:
        super().__init__(message)
        self.sources = sources


@dataclass
class SourceReport:
    name: str
    fresh: bool = False
    frame: str = ""
    error: str = ""
    caption: CaptionState | None = None
    trusted: bool = False  # fresh by the frame watch's recent proof, not probed by this pass


@dataclass
class StreamSetResult:
    sources: dict[str, SourceReport] = field(default_factory=dict)
    waited_s: float = 0.0
    # What the pass learnt, for the engine to write with the Ready verdict; ``known``: the
    # record as read after every step, when every source was trusted (nothing to read again).
    facts: Callable[[ResourceStatus], None] | None = None
    known: ResourceStatus | None = None


def unhealthy(result: StreamSetResult, captioning: bool, max_age_s: float) -> dict[str, str]:
    bad = {}
    for name, report in result.sources.items():
        if not report.fresh:
            bad[name] = f"no fresh frames ({report.error or 'not probed'})"
        elif captioning:
            state = report.caption
            age = state.age_s() if state is not None else None
            if age is None:
                detail = state.error if state is not None and state.error else "none yet"
                bad[name] = f"no captions ({detail})"
            elif age > max_age_s:
                bad[name] = f"last caption {age:.0f}s ago"
    return bad


def degraded_message(bad: dict[str, str], result: StreamSetResult) -> str:
    ok = len(result.sources) - len(bad)
    parts = [f"{name}: {why}" for name, why in sorted(bad.items())]
    return f"{len(bad)} of {len(result.sources)} source(s) degraded ({ok} fine): " + \
        "; ".join(parts)


def caption_facts(state: CaptionState) -> SourceFacts:
    """A source's caption facts (only those fields set, so they merge into what is known)."""
    at = None if state.at is None else datetime.fromtimestamp(state.at, UTC).isoformat(
        timespec="seconds").replace("+00:00", "Z")
    return SourceFacts(last_caption=state.text, last_caption_at=at, caption_chunks=state.chunks,
                       empty_chunks=state.empty_chunks, caption_latency_ms=state.latency_ms,
                       caption_error=state.error)
