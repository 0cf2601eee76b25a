"""Removing a Deployment's containers: only what the record lists AND that carries our labels.

Why the two checks: the record says what we created, the labels say the container in front of
us is still that one. A name is not enough — after a delete outside the reconciler, someone
else's container may have taken it — and neither is a label alone (we never remove what our
record does not list). The decisions (what to look up, what to do with what was found, what to
say) are pure functions, tested without an engine; ``remove_owned`` only carries them out.
"""

from __future__ import annotations

from enum import Enum

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo, DockerEngine
from controllers.kinds.deployment.plan import KIND_CONTAINER
from specs.models import DeploymentSpec
from state.keys import Key
from state.models import InventoryItem, Owner, ResourceStatus
from state.store import Store

# One source for every default: the spec model's (a record from an older release may lack it).
DEFAULT_STOP_GRACE_S = int(DeploymentSpec.model_fields["stopGraceSeconds"].default)
SHORT_ID_CHARS = 12


class Verdict(Enum):
    GONE = "gone"  # nothing to remove: forget it
    FOREIGN = "foreign"  # not ours (any more): leave it and keep it on record
    REMOVE = "remove"  # ours: stop, remove, forget


def containers_of(record: ResourceStatus) -> list[InventoryItem]:
    """The record's container entries (a copy: forgetting one does not skip the next)."""
    return [item for item in record.inventory if item.kind == KIND_CONTAINER]


def lookup_ref(item: InventoryItem) -> str:
    """A created item is known by ID; only a pending one (the create call may or may not have
    happened) is looked up by name, so a newer container is never taken for it."""
    return item.id if item.id else item.name


def judge(info: ContainerInfo | None, instance: Owner, resource: Key) -> Verdict:
    if info is None:
        return Verdict.GONE
    if not ownership.is_owned(info.labels, instance, resource):
        return Verdict.FOREIGN
    return Verdict.REMOVE


def describe(item: InventoryItem, info: ContainerInfo | None, verdict: Verdict) -> str:
    """The line ``delete`` prints for one container."""
    if verdict is Verdict.GONE or info is None:
        return f"container {item.name} (already gone)"
    if verdict is Verdict.FOREIGN:
        return f"container {item.name}: not ours (labels do not match), left untouched"
    return f"container {item.name} ({info.id[:SHORT_ID_CHARS]})"


def stop_grace(record: ResourceStatus) -> int:
    """The Deployment's own stopGraceSeconds (as last applied), so a delete drains as gently
    as a recreate does."""
    grace = (record.applied_spec or {}).get("stopGraceSeconds")
    return int(grace) if isinstance(grace, int | float) else DEFAULT_STOP_GRACE_S


def remove_owned(engine: DockerEngine, store: Store, instance: Owner, resource: Key,
                 record: ResourceStatus) -> tuple[list[str], list[str]]:
    """Delete containers the inventory lists AND that carry our labels; returns (removed,
    left) with a reason for each one left alone (still on record)."""
    removed, left = [], []
    for item in containers_of(record):
        info = engine.container(lookup_ref(item))
        verdict = judge(info, instance, resource)
        if verdict is Verdict.FOREIGN:
            left.append(describe(item, info, verdict))
            continue
        if verdict is Verdict.REMOVE and info is not None:
            engine.stop(info.id, stop_grace(record))
            engine.remove(info.id)
        removed.append(describe(item, info, verdict))
        forget(store, record, item)
    return removed, left


def forget(store: Store, record: ResourceStatus, item: InventoryItem) -> None:
    """Drop one inventory entry of ``record``'s resource (its other entries stay)."""
    def mutate(st: ResourceStatus) -> None:
        st.remove_inventory(item.kind, item.name)
    store.update(record.key, mutate)
