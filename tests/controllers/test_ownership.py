"""Ownership labels, pure: what makes a container ours, and what never does."""

from __future__ import annotations

import hashlib

import pytest

from controllers import ownership as own
from state.keys import Key
from state.models import Owner

MINE = Owner("default", "a" * 32)
THEIRS = Owner("default", "b" * 32)
VLM, OTHER = Key("Deployment", "vlm"), Key("Deployment", "other")
CANARY, CAMS = Key("Experiment", "c"), Key("StreamSet", "cams")


def test_labels_say_instance_resource_spec_owner_and_run_id_only_when_given() -> None:
    labels = own.labels_for(MINE, VLM, "h1")
    assert labels == {own.LABEL_MANAGED_BY: own.MANAGED_BY, own.LABEL_INSTANCE: "default",
                      own.LABEL_RESOURCE: VLM, own.LABEL_SPEC_HASH: "h1",
                      own.LABEL_OWNER: "a" * 32}
    with_run = own.labels_for(MINE, CANARY, "h2", run_id="canary-001")
    assert with_run[own.LABEL_RUN_ID] == "canary-001"
    with pytest.raises(TypeError, match="no owner ID"):  # a plain name: refused, not unowned
        own.labels_for("plain", VLM, "h1")  # type: ignore[arg-type]


def test_a_container_is_ours_only_with_every_label_of_its_own_resource() -> None:
    labels = own.labels_for(MINE, VLM, "h1")
    assert own.is_owned(labels, MINE, VLM)
    assert not own.is_owned(labels, MINE, OTHER)  # another resource's container
    assert not own.is_owned(labels, Owner("staging", "a" * 32), VLM)
    assert not own.is_owned(labels, THEIRS, VLM)  # another state directory
    assert not own.is_owned({}, MINE, VLM)
    unlabelled_owner = {k: v for k, v in labels.items() if k != own.LABEL_OWNER}
    assert own.is_owned(unlabelled_owner, MINE, VLM)  # before owner IDs existed
    assert not own.is_owned({**labels, own.LABEL_MANAGED_BY: "someone-else"}, MINE,
                            VLM)


def test_the_selector_filters_by_instance_and_optionally_resource() -> None:
    assert own.selector(MINE) == {own.LABEL_MANAGED_BY: own.MANAGED_BY,
                                  own.LABEL_INSTANCE: "default"}
    assert own.selector(MINE, CAMS)[own.LABEL_RESOURCE] == CAMS


def test_a_conflict_says_whose_the_container_is() -> None:
    theirs = own.labels_for(THEIRS, VLM, "h1")
    said = own.why_not_ours(theirs, MINE)
    assert said == ("created by another state directory with the same instance name, owner ID "
                    "bbbbbbbb...")
    assert own.why_not_ours({own.LABEL_RESOURCE: "Deployment/x"}, MINE) == "Deployment/x"
    assert own.why_not_ours({}, MINE) == "no reconciler labels"
    same_dir = own.labels_for(MINE, VLM, "h1")
    assert own.why_not_ours(same_dir, MINE) == VLM


def test_names_keep_instances_apart_and_project_names_follow_the_run_id() -> None:
    assert own.container_name("default", "vlm") == "rtvi-vlm"
    assert own.container_name("staging", "vlm") == "rtvi-staging-vlm"
    run_id = "Canary-4.001_" + "x" * 40
    stem = "canary4001" + "x" * 20  # lowercase alphanumerics, the first 30
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:32]
    assert own.project_name(run_id) == f"{stem}-{digest}"
    assert own.project_name("canary-4-001") != own.project_name("canary-4-002")
