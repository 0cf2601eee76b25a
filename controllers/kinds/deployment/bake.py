"""A promotion's bake watched by live numbers: what its dependents read of the promoted service.

Why: a qualification measures a candidate under the canary's load; production's load is its
own (more streams, other pictures), and a person may let a rejected candidate through. So for
``bakeSeconds`` after a promotion, the resources that use the service (a StreamSet: each
source's caption latency, ``Facts.live``) are read against what they read of the version it
replaced, taken as the promotion began. A median latency above that by more than the gate's
``maxP95Regression``, in ``BREACHES`` checks in a row (one chunk is noise), rolls it back,
saying both numbers. The resources are found through the spec set's references, and their
readings through their kind's facts: nothing here names another kind.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from datetime import datetime

from controllers.contract import PassContext
from controllers.facts import Facts, LiveSignal
from controllers.kinds.deployment.facts import PromotionFacts
from specs.kinds import SPEC_KINDS
from state.errors import StateError
from state.keys import InvalidKey, Key
from state.store import Store

BAKE_POLL_S = 10.0  # how often a bake with live numbers is looked at (its dependents woken)
BREACHES = 2  # checks in a row over the limit before a rollback


def dependents(ctx: PassContext, resource: Key) -> list[Key]:
    """The resources whose spec names ``resource`` (their kinds' references)."""
    found = []
    for res in ctx.spec_set.resources if ctx.spec_set is not None else []:
        declared = SPEC_KINDS.get(res.kind)
        if declared is not None and any(ref.kind == resource.kind and name == resource.name
                                        for ref, name in declared.named(res)):
            found.append(Key(res.kind, res.metadata.name))
    return found


def readings(store: Store, keys: list[Key], since: str | None = None
             ) -> Iterator[tuple[Key, LiveSignal]]:
    """Every latency ``keys`` read live (taken after ``since``, when given); a record that
    cannot be read gives none (its own pass reports it)."""
    for key in keys:
        model = Facts.for_kind(key.kind)
        if model is None:
            continue
        try:
            record = store.load(key)
        except StateError:
            continue
        for signal in model.of(record).live():
            if signal.latency_ms is not None and (since is None or _after(signal.at, since)):
                yield key, signal


def watch_for(ctx: PassContext, resource: Key, regression: float
              ) -> tuple[list[str], float | None, float | None]:
    """As a promotion begins: what will be watched, the median latency it reads of the
    version being replaced, and the limit the candidate's may not pass (None, None: nothing
    reads a latency of it, and only the container's life is watched)."""
    found = list(readings(ctx.services.store, dependents(ctx, resource)))
    keys = sorted({str(key) for key, _ in found})  # those that read a latency of it
    before = _median([s.latency_ms for _, s in found])
    if before is None:
        return [], None, None
    return keys, round(before, 1), round(before * (1 + regression), 1)


def watched_keys(found: PromotionFacts) -> tuple[Key, ...]:
    """The resources a bake reads (woken at each look, so their readings are fresh)."""
    keys = []
    for text in found.live_watched or []:
        try:
            keys.append(Key.parse(text))
        except InvalidKey:
            continue
    return tuple(keys)


def check(store: Store, found: PromotionFacts) -> tuple[PromotionFacts, str | None]:
    """One look during the bake: the watch as it stands now, and why it breached (None: it
    did not, or nothing was read since the switch)."""
    limit, before = found.live_limit_ms, found.live_before_ms
    if limit is None or before is None:
        return found, None
    fresh = list(readings(store, list(watched_keys(found)), found.since))
    now = _median([s.latency_ms for _, s in fresh])
    if now is None:
        return found, None
    over = (found.live_over or 0) + 1 if now > limit else 0
    updated = found.model_copy(update={"live_over": over})
    if over < BREACHES:
        return updated, None
    said = ", ".join(sorted({str(key) for key, _ in fresh}))
    return updated, (f"caption latency {now:.0f} ms (median of {len(fresh)} reading(s) of "
                     f"{said}, {over} looks in a row) against {before:.0f} ms before the "
                     f"switch (at most {limit:.0f} ms)")


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _after(at: str | None, since: str) -> bool:
    try:
        return at is not None and _moment(at) > _moment(since)
    except ValueError:
        return False


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
