"""The Deployment plan is a pure function: desired + observed + record → actions with causes."""

from __future__ import annotations

import pytest

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo
from controllers.errors import PlanError
from controllers.kinds.deployment.plan import Desired, plan
from specs.errors import Location, SpecIssue
from specs.rules import R_SECRET_VALUE
from specs.validate import parse_text, spec_hash
from state.keys import Key
from state.models import InventoryItem, Owner, ResourceStatus
from tests.specs.cases import HEADER, body

INSTANCE = Owner("default", "0" * 32)
IMAGE_A = "sha256:" + "a" * 64
IMAGE_B = "sha256:" + "b" * 64


def _desired(extra: str = "") -> Desired:
    dep = parse_text(HEADER + body(extra=extra)).deployments[0]
    digest = spec_hash(dep)
    return Desired(dep, Key("Deployment", "vlm"), digest, "rtvi-vlm", IMAGE_A, {},
                   ownership.labels_for(INSTANCE, Key("Deployment", "vlm"), digest),
                   "http://127.0.0.1:18000", "http://127.0.0.1:18000", "x.yaml")


def _container(desired: Desired, status: str = "running", image: str = IMAGE_A,
               labels: dict[str, str] | None = None, exit_code: int = 0) -> ContainerInfo:
    return ContainerInfo("c1", "rtvi-vlm", status, exit_code, None,
                         desired.labels if labels is None else labels, image, "")


def test_absent_container_is_created_as_new() -> None:
    desired = _desired()
    result = plan(desired, None, None, INSTANCE)
    assert [(a.verb, a.cause) for a in result.actions] == [("create", "new Deployment")]


def test_container_removed_by_hand_is_named_as_the_cause() -> None:
    desired = _desired()
    record = ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm")
    record.upsert_inventory(InventoryItem(kind="container", name="rtvi-vlm", host="local",
                                          id="c1", state="created", created_at="t"))
    result = plan(desired, None, record, INSTANCE)
    assert "removed outside the reconciler" in result.actions[0].cause


def test_matching_running_container_needs_nothing() -> None:
    desired = _desired()
    assert plan(desired, _container(desired), None, INSTANCE).actions == []


def test_the_plan_carries_the_record_it_was_made_from() -> None:
    """The pass that acts on the plan compares with this very record (the steady state: no
    re-read, and no write when nothing changed), never a later one."""
    desired = _desired()
    record = ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm")
    made = plan(desired, _container(desired), record, INSTANCE)
    assert made.record is record
    assert made.resource == desired.resource


def test_foreign_container_is_a_conflict_without_actions() -> None:
    desired = _desired()
    result = plan(desired, _container(desired, labels={"app": "theirs"}), None, INSTANCE)
    assert result.actions == []
    assert result.conflict is not None
    other_instance = dict(desired.labels, **{ownership.LABEL_INSTANCE: "other"})
    assert plan(desired, _container(desired, labels=other_instance), None,
                INSTANCE).conflict is not None


def test_env_change_is_one_recreate_naming_the_field() -> None:
    old = _desired("  env: {X: 1}\n")
    new = _desired("  env: {X: 2}\n")
    record = ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm",
                            applied_spec=old.deployment.spec.model_dump(mode="json"))
    result = plan(new, _container(old), record, INSTANCE)
    assert len(result.actions) == 1
    assert result.actions[0].verb == "recreate"
    assert "env.X '1' → '2'" in result.actions[0].cause


def test_image_change_and_exit_are_causes() -> None:
    desired = _desired()
    result = plan(desired, _container(desired, status="exited", image=IMAGE_B, exit_code=3),
                  None, INSTANCE)
    cause = result.actions[0].cause
    assert "image changed sha256:bbbbbbbbbbbb.. → sha256:aaaaaaaaaaaa.." in cause
    assert "exited with code 3" in cause


def test_paused_container_is_reported_not_replaced() -> None:
    desired = _desired()
    result = plan(desired, _container(desired, status="paused", image=IMAGE_B), None, INSTANCE)
    assert result.actions == []
    assert result.conflict is None
    assert result.paused is not None
    assert "docker unpause rtvi-vlm" in result.paused
    assert "image changed" in result.paused  # what will happen once it is resumed


def test_unusable_secret_refuses_a_plan_that_creates_but_not_one_in_sync() -> None:
    desired = _desired()
    issue = SpecIssue(Location("x.yaml", 12, 3), "spec.secrets.0", "secret HF_TOKEN: /dev/zero "
                      "is a character device", R_SECRET_VALUE)
    desired.secret_issues = [issue]
    with pytest.raises(PlanError) as info:
        plan(desired, None, None, INSTANCE)
    assert str(info.value).startswith("x.yaml:12:3: spec.secrets.0: secret HF_TOKEN")
    assert plan(desired, _container(desired), None, INSTANCE).actions == []
