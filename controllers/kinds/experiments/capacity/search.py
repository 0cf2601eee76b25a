"""Capacity search (issue 12, ``type: capacity``): the highest stable and the first unstable
live-stream count, found in as few stability windows as possible.

Why few windows: each window holds N live streams for minutes against a fresh service. The VSS
harness ramps from ``initialStreamCount`` by ``addStreamCount`` until a window fails, then
bisects; near a far boundary that is many windows. Here the windows' own measurements steer:
  1. The first window is at ``initialStreamCount`` (the harness's seed, so runs compare).
  2. While no unstable count is known, the next count is where the p95 chunk latency measured so
     far (a straight line through the windows' (N, p95) points) reaches the contract's maximum;
     without such a line, the step grows (add, 2·add, 4·add, ...), up to ``maxStreamCount``.
  3. Once both a stable and an unstable count are known, the next count is that prediction when
     it falls strictly between them, else the midpoint, until they are adjacent (±1).
A latency breach during the search is the measured unstable point, never a restart. A window
that cannot be judged (one stream failed, cleanup not proved, a fatal gate) ends the search
INCONCLUSIVE. When the very first window fails (BCD 3.3), the search is repeated with the
initial count halved (rounded down) as a child attempt (``<runId>.r<n>``), and the failed
attempt stays in the ledger; when even one stream fails, the search is INCONCLUSIVE.

Everything here is pure: ``WindowRunner`` is the only way out, so the same search runs against
real windows, the emulator, or the simulation in ``bench/capacity.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum

MIN_RISE = 0.05  # the line is followed when p95 grows by 5 % of its mean across the windows


class Verdict(Enum):
    STABLE = "stable"
    UNSTABLE = "unstable"  # a success criterion failed: latency, success rate, dropped chunks
    INCONCLUSIVE = "inconclusive"  # cannot be judged: the search stops


@dataclass(frozen=True)
class Window:
    """One stability window's verdict, as the ledger keeps it."""

    streams: int
    verdict: Verdict
    p95_ms: float | None  # the window's p95 chunk latency; None when not measured
    reason: str
    attempt: str = ""  # the run ID it ran under (a child ``<runId>.r<n>`` after a halving)


WindowRunner = Callable[[str, int], Window]  # (attempt run ID, stream count) -> verdict


@dataclass(frozen=True)
class SearchSpec:
    initial: int  # initialStreamCount
    add: int  # addStreamCount
    max_streams: int  # maxStreamCount: never more
    max_p95_ms: float  # the contract's maximum p95 chunk latency


@dataclass
class Outcome:
    highest_stable: int | None = None
    first_unstable: int | None = None
    ledger: list[Window] = field(default_factory=list)
    inconclusive: str = ""  # why the search stopped without a boundary

    def note(self, window: Window) -> bool:
        """Put a window in the ledger and move the bounds; False when it cannot be judged."""
        self.ledger.append(window)
        if window.verdict is Verdict.INCONCLUSIVE:
            self.inconclusive = f"{window.streams} streams: {window.reason}"
            return False
        if window.verdict is Verdict.STABLE:
            self.highest_stable = max(self.highest_stable or 0, window.streams)
        else:
            self.first_unstable = min(self.first_unstable or window.streams, window.streams)
        return True

    @property
    def found(self) -> bool:
        """The boundary within ±1: adjacent stable and unstable counts."""
        return (not self.inconclusive and self.highest_stable is not None
                and self.first_unstable == self.highest_stable + 1)


def predicted_limit(windows: list[Window], max_p95_ms: float) -> int | None:
    """The largest N whose p95 stays within the maximum, on the least-squares line through the
    measured (N, p95) points (every window so far: an earlier attempt's measured the same
    system, so it steers; the boundary itself is only ever taken from one attempt's windows).
    None when latency does not explain the failures (an unstable window within the maximum:
    admission or dropped chunks failed it), with fewer than two distinct N, or on a line that
    does not visibly rise (``MIN_RISE``: jitter on a flat latency would otherwise point
    anywhere)."""
    judged = [w for w in windows if w.verdict is not Verdict.INCONCLUSIVE]
    if any(w.verdict is Verdict.UNSTABLE and (w.p95_ms is None or w.p95_ms <= max_p95_ms)
           for w in judged):
        return None
    points = [(w.streams, w.p95_ms) for w in judged if w.p95_ms is not None]
    if len({n for n, _ in points}) < 2:
        return None
    mean_n = sum(n for n, _ in points) / len(points)
    mean_p = sum(p for _, p in points) / len(points)
    spread = sum((n - mean_n) ** 2 for n, _ in points)
    slope = sum((n - mean_n) * (p - mean_p) for n, p in points) / spread
    span = max(n for n, _ in points) - min(n for n, _ in points)
    if slope <= 0 or slope * span < MIN_RISE * mean_p:
        return None  # latency does not visibly grow with load: no line to follow
    crossing = mean_n + (max_p95_ms - mean_p) / slope
    return math.floor(crossing) if math.isfinite(crossing) else None


def next_count(spec: SearchSpec, outcome: Outcome, grown: int) -> int:
    """Where the next window goes (see the module docstring); ``grown``: windows run since the
    first while no unstable count was known."""
    lo = outcome.highest_stable or 0
    hi = outcome.first_unstable
    top = spec.max_streams if hi is None else hi - 1
    guess = predicted_limit(outcome.ledger, spec.max_p95_ms)
    if guess is not None and guess <= lo:
        target = lo + 1  # the line puts the limit here: confirm the side just above it
    elif guess is not None and (hi is None or guess < hi):
        # Never more than double the count in one window: a line from two noisy points
        # can point far beyond the boundary.
        target = guess if hi is not None else min(guess, 2 * lo + spec.add)
    elif hi is None:
        target = lo + spec.add * 2 ** grown
    else:
        target = (lo + hi) // 2
    return max(lo + 1, min(target, top))


def search_attempt(run: WindowRunner, attempt: str, spec: SearchSpec,
                   ledger: list[Window]) -> Outcome:
    """One attempt from ``spec.initial`` (its windows go to ``ledger``); when its first window
    fails, ``highest_stable`` stays None (the caller halves)."""
    outcome = Outcome(ledger=ledger)
    count, grown = spec.initial, 0
    while outcome.note(run(attempt, count)):
        if outcome.highest_stable is None or outcome.found:
            break
        if outcome.first_unstable is None and count >= spec.max_streams:
            break  # stable at the most the spec allows
        count = next_count(spec, outcome, grown)
        grown += outcome.first_unstable is None
    return outcome


def harness_attempt(run: WindowRunner, attempt: str, spec: SearchSpec,
                    ledger: list[Window]) -> Outcome:
    """The VSS harness's way, for comparison (``bench/capacity.py``): a linear ramp by
    ``add`` from ``initial`` until a window fails, then bisection."""
    outcome = Outcome(ledger=ledger)
    count = spec.initial
    while count <= spec.max_streams:
        if not outcome.note(run(attempt, count)):
            return outcome
        if outcome.first_unstable is not None:
            break
        count += spec.add
    while (outcome.highest_stable is not None and outcome.first_unstable is not None
           and outcome.first_unstable - outcome.highest_stable > 1):
        if not outcome.note(run(attempt, (outcome.highest_stable + outcome.first_unstable) // 2)):
            return outcome
    return outcome


Attempt = Callable[[WindowRunner, str, SearchSpec, list[Window]], Outcome]


def _halving(one: Attempt, run: WindowRunner, run_id: str, spec: SearchSpec) -> Outcome:
    """BCD 3.3: while the first window of an attempt fails, try again with the initial count
    halved (rounded down) as child attempt ``<runId>.r<n>``; every attempt's windows stay in
    the one ledger, the original failure first."""
    ledger: list[Window] = []
    initial, attempt, n = spec.initial, run_id, 0
    while True:
        outcome = one(run, attempt, replace(spec, initial=initial), ledger)
        if outcome.inconclusive or outcome.highest_stable is not None:
            return outcome
        if initial <= 1:  # BCD 3.3: one stream failing leaves nothing to search
            outcome.inconclusive = (f"even 1 stream is unstable ({outcome.ledger[-1].reason}): "
                                    "no count to search from")
            return outcome
        n += 1
        initial, attempt = initial // 2, f"{run_id}.r{n}"


def search(run: WindowRunner, run_id: str, spec: SearchSpec) -> Outcome:
    """The whole search, with BCD 3.3's halving of a failed initial window."""
    return _halving(search_attempt, run, run_id, spec)


def harness_search(run: WindowRunner, run_id: str, spec: SearchSpec) -> Outcome:
    """The harness's ramp and bisection, with the same halving (the baseline)."""
    return _halving(harness_attempt, run, run_id, spec)
