"""Every event the daemon records is counted in ``/metrics`` by kind, type and reason: that is
how promotions, rejections and rollbacks (issue 39) are counted, with no kind named here."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from reconciler.metrics import Metrics
from reconciler.workqueue import QueueStats
from state.store import Store


class _Daemon:
    def queue_stats(self) -> QueueStats:
        return QueueStats(0, 0, 0)

    def api_calls(self) -> Iterable[tuple[str, float]]:
        return ()

    def replica_state(self) -> tuple[int, bool] | None:
        return None


def test_recorded_events_are_counted_by_kind_type_and_reason(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    metrics = Metrics(_Daemon())
    store.events.observers.append(metrics.event)
    store.events.append("Deployment/vlm", "Normal", "Promoted", "candidate promoted")
    store.events.append("Deployment/vlm", "Warning", "PromotionRejected", "latency: ...")
    store.events.append("Deployment/other", "Warning", "PromotionRejected", "isolation: ...")
    store.events.append("Deployment/vlm", "Warning", "RolledBack", "died during its bake")

    def count(reason: str, type_: str) -> float | None:
        return metrics.registry.get_sample_value("rtvi_reconciler_events_total", {
            "kind": "Deployment", "type": type_, "reason": reason})
    assert count("Promoted", "Normal") == 1
    assert count("PromotionRejected", "Warning") == 2
    assert count("RolledBack", "Warning") == 1
    assert count("Baked", "Normal") is None  # never recorded: no sample
    assert [e.reason for e in store.events.read()] == ["Promoted", "PromotionRejected",
                                                       "PromotionRejected", "RolledBack"]
