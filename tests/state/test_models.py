"""ResourceStatus semantics: JSON round trip, condition transitions, history bound, inventory."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from state import (
    HISTORY_LIMIT,
    HistoryEntry,
    InventoryItem,
    ResourceStatus,
    utc_now,
)

T0 = "2026-12-02T18:00:00.000Z"
T1 = "2026-12-02T18:05:00.000Z"
T2 = "2026-12-02T18:10:00.000Z"


def _entry(i: int) -> HistoryEntry:
    return HistoryEntry(
        time=T0, action="create", target=f"container c{i}", cause=f"cause {i}", result="ok"
    )


def _full_status() -> ResourceStatus:
    status = ResourceStatus(
        resource="Deployment/vlm",
        kind="Deployment",
        name="vlm",
        observed_generation="abc",
        desired_generation="def",
        applied_revision="rev1",
        source_file="specs/a.yaml",
        facts={"gpus": [0, 1], "nested": {"k": None, "f": 1.5}},
        applied_spec={"image": "x@sha256:00"},
    )
    status.set_condition("Ready", "False", "Starting", "waiting for /v1/ready", now=T0)
    status.add_history(_entry(1))
    status.upsert_inventory(
        InventoryItem(kind="container", name="rtvi-vlm", host="local", created_at=T0)
    )
    return status


def test_round_trip_through_json() -> None:
    status = _full_status()
    again = ResourceStatus.model_validate_json(status.model_dump_json())
    assert again == status
    assert again.inventory[0].state == "pending"


def test_unknown_fields_are_refused() -> None:
    data = _full_status().model_dump(mode="json")
    data["observedGeneration"] = "typo"
    with pytest.raises(ValidationError):
        ResourceStatus.model_validate(data)


def test_utc_now_format() -> None:
    stamp = utc_now()
    assert len(stamp) == len(T0)
    assert stamp.endswith("Z")
    assert stamp[10] == "T"


def test_transition_time_moves_only_when_status_changes() -> None:
    status = ResourceStatus(resource="Host/h", kind="Host", name="h")
    assert status.condition("Ready") is None
    assert status.set_condition("Ready", "False", "Connecting", "ssh", now=T0) is True
    # Same status, new message: changed, but the transition time stays.
    assert status.set_condition("Ready", "False", "Connecting", "ssh retry 2", now=T1) is True
    ready = status.condition("Ready")
    assert ready is not None
    assert ready.last_transition_time == T0
    assert ready.message == "ssh retry 2"
    # Nothing different at all: no change reported.
    assert status.set_condition("Ready", "False", "Connecting", "ssh retry 2", now=T2) is False
    # Status flips: the transition time follows.
    assert status.set_condition("Ready", "True", "Connected", now=T2) is True
    ready = status.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.last_transition_time) == ("True", "Connected", T2)
    assert len(status.conditions) == 1
    status.set_condition("Degraded", "False", "Healthy", now=T2)
    assert [c.type for c in status.conditions] == ["Ready", "Degraded"]


def test_history_is_bounded_newest_last() -> None:
    status = ResourceStatus(resource="Host/h", kind="Host", name="h")
    for i in range(HISTORY_LIMIT + 7):
        status.add_history(_entry(i))
    assert len(status.history) == HISTORY_LIMIT
    assert status.history[0].cause == "cause 7"
    assert status.history[-1].cause == f"cause {HISTORY_LIMIT + 6}"
    for i in range(3):
        status.add_history(_entry(100 + i), limit=2)
    assert [h.cause for h in status.history] == ["cause 101", "cause 102"]


def test_inventory_upsert_and_remove() -> None:
    status = ResourceStatus(resource="StreamSet/s", kind="StreamSet", name="s")
    status.upsert_inventory(InventoryItem(kind="stream", name="a", host="h", created_at=T0))
    status.upsert_inventory(InventoryItem(kind="container", name="a", host="h", created_at=T0))
    status.upsert_inventory(
        InventoryItem(
            kind="stream", name="a", host="h", id="uuid-1", state="created", created_at=T1
        )
    )
    assert len(status.inventory) == 2
    item = status.inventory_item("stream", "a")
    assert item is not None
    assert (item.id, item.state) == ("uuid-1", "created")
    status.remove_inventory("stream", "a")
    status.remove_inventory("stream", "missing")
    assert status.inventory_item("stream", "a") is None
    assert [(i.kind, i.name) for i in status.inventory] == [("container", "a")]
