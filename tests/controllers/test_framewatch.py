"""Which sources the background frame watch re-proves, and in which order (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from controllers.kinds.streamset.framewatch import due
from state.models import ResourceStatus

NOW = datetime(2026, 12, 4, 9, 0, 0, tzinfo=UTC).timestamp()


def _set(name: str, ready: str, sources: dict[str, dict[str, object]],
         max_age: float = 15) -> ResourceStatus:
    st = ResourceStatus(resource=f"StreamSet/{name}", kind="StreamSet", name=name)
    st.set_condition("Ready", ready, "x")  # type: ignore[arg-type]
    st.facts = {"maxFrameAgeSeconds": max_age, "sources": sources}
    return st


def _src(seen: str | None, fresh: bool = True, registered: bool = True) -> dict[str, object]:
    fact: dict[str, object] = {"registered": registered, "framesFresh": fresh,
                               "rtviUrl": "rtsp://127.0.0.1:8554/x"}
    if seen is not None:
        fact["lastFrameAt"] = seen
    return fact


def test_only_fresh_registered_sources_past_their_budget_oldest_first() -> None:
    records = [
        _set("a", "True", {"old": _src("2026-12-04T08:58:00Z"),   # 120 s: due
                           "new": _src("2026-12-04T08:59:55Z"),   # 5 s: not yet
                           "broken": _src("2026-12-04T08:50:00Z", fresh=False),  # the pass's
                           "gone": _src("2026-12-04T08:50:00Z", registered=False)}),
        _set("b", "True", {"older": _src("2026-12-04T08:57:00Z"),
                           "never": _src(None)}),
        _set("c", "False", {"x": _src("2026-12-04T08:00:00Z"),  # not Ready: still watched
                            "failing": _src("2026-12-04T08:00:00Z", fresh=False)}),
        _set("d", "True", {"slow": _src("2026-12-04T08:58:00Z")}, max_age=600),
    ]
    assert due(records, NOW) == [("StreamSet/b", "never", "rtsp://127.0.0.1:8554/x"),
                                 ("StreamSet/c", "x", "rtsp://127.0.0.1:8554/x"),
                                 ("StreamSet/b", "older", "rtsp://127.0.0.1:8554/x"),
                                 ("StreamSet/a", "old", "rtsp://127.0.0.1:8554/x")]


def test_other_kinds_and_bad_facts_are_ignored() -> None:
    dep = ResourceStatus(resource="Deployment/v", kind="Deployment", name="v")
    dep.set_condition("Ready", "True", "x")
    odd = _set("e", "True", {"s": {"registered": "yes?", "framesFresh": True}})
    assert due([dep, odd], NOW) == []


def test_the_watch_rests_until_the_next_proof_falls_due() -> None:
    from controllers.kinds.streamset.framewatch import MAX_IDLE_S, ROUND_PAUSE_S, idle_s
    assert idle_s([], NOW) == MAX_IDLE_S
    soon = _set("a", "True", {"s": _src("2026-12-04T08:59:47Z")})  # 13 s of a 15 s budget
    assert idle_s([soon], NOW) == 2.0
    late = _set("b", "True", {"s": _src("2026-12-04T08:50:00Z")})
    assert idle_s([soon, late], NOW) == ROUND_PAUSE_S
