"""Every cause, conflict and adoption decision of the Deployment plan, word for word.

The plan's messages are what ``reconciler plan`` shows a person deciding whether to apply; an
adoption decision is what keeps us off someone else's container. Both are pure, so each path
is pinned here exactly (``tests/controllers/test_plan.py`` has the broad cases).
"""

from __future__ import annotations

import pytest

from controllers import ownership
from controllers.actions import Action
from controllers.clients.docker_client import ContainerInfo
from controllers.errors import PlanError
from controllers.kinds.deployment.plan import (
    MAX_IMAGE_CHARS,
    MAX_VALUE_CHARS,
    STAGED_SUFFIX,
    Desired,
    Plan,
    plan,
    staged_name,
)
from specs.errors import Location, SpecIssue
from specs.rules import R_SECRET_VALUE
from specs.validate import parse_text, spec_hash
from state.keys import Key
from state.models import InventoryItem, Owner, ResourceStatus
from tests.specs.cases import HEADER, body

INSTANCE = Owner("default", "0" * 32)
IMAGE_A = "sha256:" + "a" * 64
IMAGE_B = "sha256:" + "b" * 64
NAME = "rtvi-vlm"
RESOURCE = Key("Deployment", "vlm")


def _desired(extra: str = "", image_id: str = IMAGE_A) -> Desired:
    dep = parse_text(HEADER + body(extra=extra)).deployments[0]
    digest = spec_hash(dep)
    return Desired(dep, RESOURCE, digest, NAME, image_id, {},
                   ownership.labels_for(INSTANCE, RESOURCE, digest), "http://127.0.0.1:18000",
                   "http://127.0.0.1:18000", "x.yaml")


def _container(labels: dict[str, str], status: str = "running", image: str = IMAGE_A,
               exit_code: int = 0) -> ContainerInfo:
    return ContainerInfo("c1", NAME, status, exit_code, None, labels, image, "")


def _record(applied: Desired | None = None, item_name: str | None = None) -> ResourceStatus:
    record = ResourceStatus(resource=RESOURCE, kind="Deployment", name="vlm",
                            applied_spec=None if applied is None else
                            applied.deployment.spec.model_dump(mode="json"))
    if item_name is not None:
        record.upsert_inventory(InventoryItem(kind="container", name=item_name, host="local",
                                              id="c0", state="created", created_at="t"))
    return record


def _causes(result: Plan) -> list[tuple[str, str, str]]:
    return [(a.verb, a.target, a.cause) for a in result.actions]


# --- create -------------------------------------------------------------------------------------

def test_create_names_the_container_and_why() -> None:
    desired = _desired()
    result = plan(desired, None, None, INSTANCE)
    assert _causes(result) == [("create", f"container {NAME}", "new Deployment")]
    assert result.resource == RESOURCE
    assert result.container is None
    assert result.changes
    assert str(result.actions[0]) == f"create container {NAME}: new Deployment"


def test_create_after_a_removal_outside_us_says_so_only_for_our_recorded_name() -> None:
    desired = _desired()
    assert _causes(plan(desired, None, _record(item_name=NAME), INSTANCE)) == [
        ("create", f"container {NAME}",
         f"container {NAME} is missing (removed outside the reconciler)")]
    # A record that lists another container (or none) does not claim this one went missing.
    assert _causes(plan(desired, None, _record(item_name="rtvi-other"), INSTANCE))[0][2] == \
        "new Deployment"
    assert _causes(plan(desired, None, _record(), INSTANCE))[0][2] == "new Deployment"


# --- adoption and conflicts ---------------------------------------------------------------------

def test_a_container_with_our_labels_is_adopted_without_a_record() -> None:
    """A crash after create, before the record: the labels prove it is ours."""
    desired = _desired()
    container = _container(desired.labels)
    result = plan(desired, container, None, INSTANCE)
    assert result.actions == []
    assert result.conflict is None
    assert result.paused is None
    assert result.container is container
    assert not result.changes


def test_a_container_without_labels_is_a_conflict_word_for_word() -> None:
    desired = _desired()
    result = plan(desired, _container({"app": "theirs"}), _record(desired, NAME), INSTANCE)
    assert result.actions == []
    assert result.paused is None
    assert result.conflict == (
        f"a container named {NAME} already exists and is not ours (no reconciler labels); it "
        "is left untouched — rename or remove it, or rename the Deployment")


@pytest.mark.parametrize("change", [
    {ownership.LABEL_INSTANCE: "other"},
    {ownership.LABEL_RESOURCE: "Deployment/other"},
    {ownership.LABEL_MANAGED_BY: "someone-else"},
])
def test_a_container_labelled_for_another_instance_or_resource_is_a_conflict(
        change: dict[str, str]) -> None:
    desired = _desired()
    labels = dict(desired.labels, **change)
    result = plan(desired, _container(labels, status="exited", image=IMAGE_B), None, INSTANCE)
    assert result.actions == []
    assert result.conflict is not None
    assert f"not ours ({ownership.why_not_ours(labels, INSTANCE)})" in result.conflict


def test_a_container_of_another_state_directory_with_our_instance_name_is_named_so() -> None:
    desired = _desired()
    labels = dict(desired.labels, **{ownership.LABEL_OWNER: "0123456789abcdef" * 2})
    result = plan(desired, _container(labels), None, INSTANCE)
    assert result.actions == []
    assert result.conflict == (
        f"a container named {NAME} already exists and is not ours (created by another state "
        "directory with the same instance name, owner ID 01234567...); it is left untouched — "
        "rename or remove it, or rename the Deployment")


def test_a_paused_foreign_container_is_a_conflict_not_a_pause() -> None:
    desired = _desired()
    result = plan(desired, _container({}, status="paused"), None, INSTANCE)
    assert result.conflict is not None
    assert result.paused is None


# --- recreate causes ----------------------------------------------------------------------------

def test_spec_change_without_a_record_names_both_hashes() -> None:
    old, new = _desired("  env: {X: 1}\n"), _desired("  env: {X: 2}\n")
    result = plan(new, _container(old.labels), None, INSTANCE)
    assert _causes(result) == [("recreate", f"container {NAME}", f"spec changed (hash "
                                f"{old.spec_hash[:12]} → {new.spec_hash[:12]})")]


def test_spec_change_of_a_container_without_a_hash_label_says_none() -> None:
    new = _desired()
    labels = {k: v for k, v in new.labels.items() if k != ownership.LABEL_SPEC_HASH}
    result = plan(new, _container(labels), _record(), INSTANCE)
    assert _causes(result)[0][2] == f"spec changed (hash none → {new.spec_hash[:12]})"


def test_spec_change_with_a_record_names_each_field_old_and_new() -> None:
    old = _desired("  env: {X: 1, GONE: a}\n")
    new = _desired("  env: {X: 2, NEW: b}\n  stopGraceSeconds: 7\n")
    result = plan(new, _container(old.labels), _record(old), INSTANCE)
    assert _causes(result)[0][2] == ("spec changed: env.GONE 'a' → unset, env.NEW unset → 'b',"
                                     " env.X '1' → '2', stopGraceSeconds 30 → 7")


def test_a_changed_list_or_mapping_is_named_by_its_path() -> None:
    old = _desired()
    new = _desired("  secrets: [{name: HF_TOKEN, fromEnv: HF_TOKEN}]\n")
    record = _record(old)
    assert record.applied_spec is not None
    record.applied_spec["mounts"] = {"was": "a mapping"}  # a record of an older release
    record.applied_spec["gpus"] = "all"  # a scalar where a list is now: named by path only
    result = plan(new, _container(old.labels), record, INSTANCE)
    assert _causes(result)[0][2] == "spec changed: gpus, mounts, secrets"


def test_more_than_six_changed_fields_are_counted() -> None:
    old = _desired("  env: {A: 1, B: 1, C: 1, D: 1, E: 1, F: 1, G: 1, H: 1}\n")
    six = _desired("  env: {A: 2, B: 2, C: 2, D: 2, E: 2, F: 2, G: 1, H: 1}\n")
    eight = _desired("  env: {A: 2, B: 2, C: 2, D: 2, E: 2, F: 2, G: 2, H: 2}\n")
    named = ", ".join(f"env.{k} '1' → '2'" for k in "ABCDEF")
    assert _causes(plan(six, _container(old.labels), _record(old), INSTANCE))[0][2] == \
        f"spec changed: {named}"
    assert _causes(plan(eight, _container(old.labels), _record(old), INSTANCE))[0][2] == \
        f"spec changed: {named} and 2 more"


def test_a_hash_change_with_an_identical_recorded_spec_is_a_change_of_defaults() -> None:
    new = _desired()
    labels = dict(new.labels, **{ownership.LABEL_SPEC_HASH: "0" * 64})
    assert _causes(plan(new, _container(labels), _record(new), INSTANCE))[0][2] == \
        "spec changed: defaults"


def test_long_values_are_cut_to_forty_characters() -> None:
    fits = "x" * (MAX_VALUE_CHARS - 2)  # its repr has two quotes: exactly the limit
    long = "y" * (MAX_VALUE_CHARS - 1)
    old = _desired(f"  env: {{A: {fits}, B: {fits}}}\n")
    new = _desired(f"  env: {{A: {fits}z, B: {long}}}\n")
    cause = _causes(plan(new, _container(old.labels), _record(old), INSTANCE))[0][2]
    cut = MAX_VALUE_CHARS - 4  # the opening quote and "..." fill the rest
    assert cause == (f"spec changed: env.A '{fits}' → '{(fits + 'z')[:cut]}..., "
                     f"env.B '{fits}' → '{long[:cut]}...")


def test_image_change_shows_short_ids_and_a_short_id_whole() -> None:
    desired = _desired()
    result = plan(desired, _container(desired.labels, image=IMAGE_B), None, INSTANCE)
    assert _causes(result)[0][2] == (f"image changed {IMAGE_B[:MAX_IMAGE_CHARS]}.. → "
                                     f"{IMAGE_A[:MAX_IMAGE_CHARS]}..")
    exact = "sha256:" + "c" * (MAX_IMAGE_CHARS - 7)
    other = _desired(image_id=exact)
    result = plan(other, _container(other.labels), None, INSTANCE)
    assert _causes(result)[0][2] == f"image changed {IMAGE_A[:MAX_IMAGE_CHARS]}.. → {exact}"


@pytest.mark.parametrize(("status", "exit_code", "said"), [
    ("exited", 3, "container exited with code 3"),
    ("exited", 0, "container exited with code 0"),
    ("exited", 137, "container was killed by SIGKILL (exit code 137)"),  # not its own crash
    ("created", 0, "container is created, not running"),
    ("restarting", 1, "container is restarting, not running"),
    ("dead", 137, "container is dead, not running"),
])
def test_a_container_not_running_is_recreated(status: str, exit_code: int, said: str) -> None:
    desired = _desired()
    result = plan(desired, _container(desired.labels, status, exit_code=exit_code), None,
                  INSTANCE)
    assert _causes(result) == [("recreate", f"container {NAME}", said)]


def test_every_cause_is_named_once_in_order() -> None:
    old = _desired("  env: {X: 1}\n")
    new = _desired("  env: {X: 2}\n")
    result = plan(new, _container(old.labels, "exited", IMAGE_B, 1), _record(old), INSTANCE)
    assert _causes(result) == [("recreate", f"container {NAME}", "spec changed: env.X '1' → "
                                f"'2'; image changed {IMAGE_B[:MAX_IMAGE_CHARS]}.. → "
                                f"{IMAGE_A[:MAX_IMAGE_CHARS]}..; container exited with code 1")]


# --- paused -------------------------------------------------------------------------------------

def test_paused_in_sync_container_is_reported_without_pending_changes() -> None:
    desired = _desired()
    result = plan(desired, _container(desired.labels, "paused"), None, INSTANCE)
    assert result.actions == []
    assert result.conflict is None
    assert result.paused == (f"container {NAME} is paused; resume it with `docker unpause "
                             f"{NAME}` (the reconciler does not unpause or replace a container "
                             "someone paused)")


def test_paused_changed_container_names_what_will_happen_but_not_its_state() -> None:
    old, new = _desired("  env: {X: 1}\n"), _desired("  env: {X: 2}\n")
    result = plan(new, _container(old.labels, "paused", IMAGE_B), _record(old), INSTANCE)
    assert result.actions == []
    assert result.paused is not None
    assert result.paused.endswith(
        f"; once resumed it will be recreated: spec changed: env.X '1' → '2'; image changed "
        f"{IMAGE_B[:MAX_IMAGE_CHARS]}.. → {IMAGE_A[:MAX_IMAGE_CHARS]}..")


# --- secrets and names --------------------------------------------------------------------------

def test_unusable_secret_refuses_a_recreate_too() -> None:
    desired = _desired()
    desired.secret_issues = [SpecIssue(Location("x.yaml", 9, 5), "spec.secrets.0",
                                       "secret HF_TOKEN: /dev/zero is a character device",
                                       R_SECRET_VALUE)]
    with pytest.raises(PlanError) as caught:
        plan(desired, _container(desired.labels, "exited"), None, INSTANCE)
    assert caught.value.issues == desired.secret_issues
    # A conflict changes nothing, so it is reported as a conflict, not refused for the secret.
    assert plan(desired, _container({}), None, INSTANCE).conflict is not None


def test_staged_name_is_the_name_with_a_suffix_no_deployment_can_have() -> None:
    assert STAGED_SUFFIX == ".next"
    assert staged_name(NAME) == f"{NAME}.next"


def test_an_action_reads_as_verb_target_cause() -> None:
    assert str(Action("recreate", "container x", "why")) == "recreate container x: why"
    assert Plan(Key("Deployment", "x")).changes is False
