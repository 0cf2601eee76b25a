"""A promotion's bake watched by what the resources using the service read of it: the caption
latency of its StreamSets' sources after the switch, against what they read of the version it
replaced (their records, read through their kind's facts)."""

from __future__ import annotations

from pathlib import Path

from controllers.kinds.deployment import bake
from controllers.kinds.deployment.facts import PromotionFacts
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store

CAMERAS = Key("StreamSet", "cameras")
SINCE = "2026-12-08T00:00:00.000Z"


def _read(store: Store, latencies: dict[str, float], at: str) -> None:
    """The StreamSet's record, as its pass writes it: each source's last caption latency."""
    record = ResourceStatus(resource=str(CAMERAS), kind="StreamSet", name="cameras")
    known = StreamSetStatusFacts(sources={
        name: SourceFacts(caption_latency_ms=ms, last_caption_at=at)
        for name, ms in latencies.items()})
    known.put(record)
    store.save(record)


def _baking(before: float, limit: float) -> PromotionFacts:
    return PromotionFacts(phase="Baking", candidate="c" * 64, run="vlm-q-1", since=SINCE,
                          live_watched=[str(CAMERAS)], live_before_ms=before,
                          live_limit_ms=limit)


def test_a_slower_service_in_production_breaches_only_in_looks_in_a_row(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    _read(store, {"red": 200.0, "green": 220.0}, "2026-12-07T23:59:00Z")
    before = [s.latency_ms for _, s in bake.readings(store, [CAMERAS])]
    assert before == [220.0, 200.0]  # sources in name order
    found = _baking(210.0, 315.0)
    # Nothing read since the switch: no judgement yet.
    assert bake.check(store, found) == (found, None)
    _read(store, {"red": 640.0, "green": 660.0}, "2026-12-08T00:00:30Z")
    once, why = bake.check(store, found)
    assert (once.live_over, why) == (1, None)  # one look over: noise until the next
    twice, why = bake.check(store, once)
    assert twice.live_over == 2
    assert why == ("caption latency 650 ms (median of 2 reading(s) of StreamSet/cameras, 2 "
                   "looks in a row) against 210 ms before the switch (at most 315 ms)")
    # A look under the limit starts the count again.
    _read(store, {"red": 230.0, "green": 240.0}, "2026-12-08T00:00:40Z")
    assert bake.check(store, once) == (once.model_copy(update={"live_over": 0}), None)
    # Without a reading of the version it replaced, only the container's life is watched.
    assert bake.check(store, _baking(210.0, 315.0).model_copy(
        update={"live_limit_ms": None})) == (_baking(210.0, 315.0).model_copy(
            update={"live_limit_ms": None}), None)
