"""Ownership labels (DESIGN.md, Ownership): how we recognise what we created.

A container is ours only if it carries our managed-by label *and* our instance *and* the
resource it serves *and* no other state directory's owner ID. Anything else with the name we
want is a Conflict and is never touched.

Why an owner ID: two state directories may use the same instance name against one engine (two
people, a copied config); by name and labels alone each would "adopt", recreate or delete the
other's containers. ``Store.instance()`` returns an :class:`~state.models.Owner` carrying the
directory's ID; everything we create is labelled with it, and a container labelled with another
ID is not ours. A container with no owner label but our instance was created before owner IDs
existed and stays ours (migration). An ``Owner`` made without an owner ID (a job frozen before
owner IDs, a test's own engine calls) labels nothing with one and accepts only containers that
carry none. The functions here take an :class:`Owner` and a :class:`Key` (mypy refuses a plain
``str`` for either): a name passed where an owner was meant once labelled containers without
the owner ID.
"""

from __future__ import annotations

import hashlib
import re

from state.keys import Key
from state.models import Owner

LABEL_PREFIX = "rtvi.reconciler/"
LABEL_INSTANCE = LABEL_PREFIX + "instance"
LABEL_RESOURCE = LABEL_PREFIX + "resource"
LABEL_SPEC_HASH = LABEL_PREFIX + "spec-hash"
LABEL_MANAGED_BY = LABEL_PREFIX + "managed-by"
LABEL_SOURCE = LABEL_PREFIX + "source"  # a StreamSet source served by a publisher container
LABEL_OWNER = LABEL_PREFIX + "owner"  # the owner ID of the state directory that created it
LABEL_RUN_ID = "com.nvidia.rtvi.harness.run_id"
LABEL_ROLE = LABEL_PREFIX + "role"  # "runner": the job a run executes as, on its Host
ROLE_RUNNER = "runner"
ROLE_HARNESS = "harness"  # a job's harness container: the run's, cleaned up with it
MANAGED_BY = "rtvi-reconciler"
CONTAINER_PREFIX = "rtvi-"
OWNER_ID_SHOWN = 8  # hex digits of a foreign owner ID put in a Conflict message


def owner_id_of(instance: Owner) -> str | None:
    """The state directory's owner ID carried by ``instance`` (None only for an ``Owner``
    made without one)."""
    return instance.owner_id or None


def labels_for(instance: Owner, resource: Key, spec_hash: str,
               run_id: str | None = None) -> dict[str, str]:
    """Labels of a container we create: ours by name, instance, resource and owner ID.

    A plain name instead of the :class:`Owner` is refused here too, not only by mypy: its
    labels would lack the owner ID, and another state directory could take the container."""
    if not isinstance(instance, Owner):
        raise TypeError(f"labels_for needs the Owner of the state directory, not the plain "
                        f"name {instance!r} (its labels would carry no owner ID)")
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_INSTANCE: str(instance),
        LABEL_RESOURCE: resource,
        LABEL_SPEC_HASH: spec_hash,
    }
    owner_id = owner_id_of(instance)
    if owner_id is not None:
        labels[LABEL_OWNER] = owner_id
    if run_id is not None:
        labels[LABEL_RUN_ID] = run_id
    return labels


def selector(instance: Owner, resource: Key | None = None) -> dict[str, str]:
    """Label filter for listing what this instance (or one of its resources) may own.

    Docker's filters cannot say "owner label absent or equal", so this selects by instance
    only: filter what it lists through :func:`is_owned` before acting on it.
    """
    sel = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: str(instance)}
    if resource is not None:
        sel[LABEL_RESOURCE] = resource
    return sel


def is_owned(labels: dict[str, str], instance: Owner, resource: Key) -> bool:
    """Ours: our selector labels, and no owner label or our own (see the module docstring)."""
    if not all(labels.get(k) == v for k, v in selector(instance, resource).items()):
        return False
    theirs = labels.get(LABEL_OWNER)
    return theirs is None or theirs == owner_id_of(instance)


def why_not_ours(labels: dict[str, str], instance: Owner) -> str:
    """For a Conflict message: whose the container is, as far as its labels say."""
    theirs = labels.get(LABEL_OWNER)
    if (labels.get(LABEL_INSTANCE) == str(instance) and theirs is not None
            and theirs != owner_id_of(instance)):
        return (f"created by another state directory with the same instance name, owner ID "
                f"{theirs[:OWNER_ID_SHOWN]}...")
    return labels.get(LABEL_RESOURCE, "no reconciler labels")


def container_name(instance: str, name: str) -> str:
    """``rtvi-<name>`` for the default instance, ``rtvi-<instance>-<name>`` otherwise, so two
    instances on one engine don't fight over names."""
    if instance == "default":
        return f"{CONTAINER_PREFIX}{name}"
    return f"{CONTAINER_PREFIX}{instance}-{name}"


def project_name(run_id: str) -> str:
    """Compose-style project name of a run ID (DESIGN.md): lowercase alphanumerics, first 30,
    then ``-`` and the first 32 hex of its sha256."""
    stem = re.sub(r"[^a-z0-9]", "", run_id.lower())[:30]
    return f"{stem}-{hashlib.sha256(run_id.encode()).hexdigest()[:32]}"
