"""Ownership labels (DESIGN.md, Ownership): how we recognise what we created.

A container is ours only if it carries our managed-by label *and* our instance *and* the
resource it serves. Anything else with the name we want is a Conflict and is never touched.
"""

from __future__ import annotations

import hashlib
import re

LABEL_PREFIX = "rtvi.reconciler/"
LABEL_INSTANCE = LABEL_PREFIX + "instance"
LABEL_RESOURCE = LABEL_PREFIX + "resource"
LABEL_SPEC_HASH = LABEL_PREFIX + "spec-hash"
LABEL_MANAGED_BY = LABEL_PREFIX + "managed-by"
LABEL_SOURCE = LABEL_PREFIX + "source"  # a StreamSet source served by a publisher container
LABEL_RUN_ID = "com.nvidia.rtvi.harness.run_id"
MANAGED_BY = "rtvi-reconciler"
CONTAINER_PREFIX = "rtvi-"


def labels_for(instance: str, resource: str, spec_hash: str,
               run_id: str | None = None) -> dict[str, str]:
    labels = {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_INSTANCE: instance,
        LABEL_RESOURCE: resource,
        LABEL_SPEC_HASH: spec_hash,
    }
    if run_id is not None:
        labels[LABEL_RUN_ID] = run_id
    return labels


def selector(instance: str, resource: str | None = None) -> dict[str, str]:
    """Label filter for listing what this instance (or one of its resources) owns."""
    sel = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: instance}
    if resource is not None:
        sel[LABEL_RESOURCE] = resource
    return sel


def is_owned(labels: dict[str, str], instance: str, resource: str) -> bool:
    return all(labels.get(k) == v for k, v in selector(instance, resource).items())


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
