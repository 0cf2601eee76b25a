"""The decisions of a Deployment's removal, without an engine: what is looked up, what is done
with what was found, what is said, how gently it stops, and what is forgotten.

``tests/e2e/test_guards.py`` proves the same on a real Docker engine (a foreign
container that took the recorded name survives ``delete``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo
from controllers.kinds.deployment.removal import (
    DEFAULT_STOP_GRACE_S,
    Verdict,
    containers_of,
    describe,
    forget,
    judge,
    lookup_ref,
    stop_grace,
)
from specs.models import DeploymentSpec
from state.keys import Key
from state.models import InventoryItem, Owner, ResourceStatus
from state.store import Store

INSTANCE = Owner("default", "0" * 32)
RESOURCE = Key("Deployment", "vlm")
CONTAINER_ID = "0123456789abcdef" * 4


def _item(name: str, kind: str = "container", id_: str | None = CONTAINER_ID) -> InventoryItem:
    return InventoryItem(kind=kind, name=name, host="local", id=id_,
                         state="created" if id_ else "pending", created_at="t")


def _info(labels: dict[str, str]) -> ContainerInfo:
    return ContainerInfo(CONTAINER_ID, "rtvi-vlm", "running", 0, None, labels, "sha256:x", "")


def _record(*items: InventoryItem, applied: object = None) -> ResourceStatus:
    record = ResourceStatus(resource=RESOURCE, kind="Deployment", name="vlm",
                            applied_spec=applied)
    for item in items:
        record.upsert_inventory(item)
    return record


def test_only_container_entries_are_removed_and_the_list_is_a_copy() -> None:
    record = _record(_item("rtvi-vlm"), _item("cam-1", kind="stream"), _item("rtvi-vlm.next"))
    found = containers_of(record)
    assert [i.name for i in found] == ["rtvi-vlm", "rtvi-vlm.next"]
    record.remove_inventory("container", "rtvi-vlm")  # forgetting one does not skip the next
    assert [i.name for i in found] == ["rtvi-vlm", "rtvi-vlm.next"]


def test_a_created_item_is_looked_up_by_id_a_pending_one_by_name() -> None:
    assert lookup_ref(_item("rtvi-vlm")) == CONTAINER_ID
    assert lookup_ref(_item("rtvi-vlm", id_=None)) == "rtvi-vlm"
    assert lookup_ref(_item("rtvi-vlm", id_="")) == "rtvi-vlm"


def test_verdicts() -> None:
    ours = ownership.labels_for(INSTANCE, RESOURCE, "h" * 64)
    assert judge(None, INSTANCE, RESOURCE) is Verdict.GONE
    assert judge(_info(ours), INSTANCE, RESOURCE) is Verdict.REMOVE
    assert judge(_info({}), INSTANCE, RESOURCE) is Verdict.FOREIGN
    assert judge(_info(ours), Owner("other", "0" * 32), RESOURCE) is Verdict.FOREIGN
    assert judge(_info(ours), INSTANCE, Key("Deployment", "other")) is Verdict.FOREIGN
    another_dir = dict(ours, **{ownership.LABEL_OWNER: "f" * 32})
    assert judge(_info(another_dir), INSTANCE, RESOURCE) is Verdict.FOREIGN


def test_what_delete_says_for_each_verdict() -> None:
    item = _item("rtvi-vlm")
    info = _info({})
    assert describe(item, None, Verdict.GONE) == "container rtvi-vlm (already gone)"
    assert describe(item, info, Verdict.GONE) == "container rtvi-vlm (already gone)"
    assert describe(item, info, Verdict.FOREIGN) == (
        "container rtvi-vlm: not ours (labels do not match), left untouched")
    assert describe(item, info, Verdict.REMOVE) == "container rtvi-vlm (0123456789ab)"


@pytest.mark.parametrize(("applied", "grace"), [
    ({"stopGraceSeconds": 7}, 7),
    ({"stopGraceSeconds": 2.9}, 2),
    ({"stopGraceSeconds": 0}, 0),
    ({"stopGraceSeconds": "7"}, DEFAULT_STOP_GRACE_S),  # not a number: the default
    ({"image": "x"}, DEFAULT_STOP_GRACE_S),  # an older record without it
    (None, DEFAULT_STOP_GRACE_S),
    ({}, DEFAULT_STOP_GRACE_S),
])
def test_a_delete_stops_as_gently_as_the_spec_last_applied(applied: object,
                                                           grace: int) -> None:
    assert stop_grace(_record(applied=applied)) == grace


def test_the_default_grace_is_the_spec_models() -> None:
    assert DEFAULT_STOP_GRACE_S == DeploymentSpec.model_fields["stopGraceSeconds"].default == 30


def test_forget_drops_one_entry_and_keeps_the_rest(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    record = _record(_item("rtvi-vlm"), _item("rtvi-vlm.next"), _item("rtvi-vlm", kind="stream"))
    store.save(record)
    forget(store, record, _item("rtvi-vlm"))
    saved = store.load(RESOURCE)
    assert saved is not None
    assert [(i.kind, i.name) for i in saved.inventory] == [("container", "rtvi-vlm.next"),
                                                           ("stream", "rtvi-vlm")]
