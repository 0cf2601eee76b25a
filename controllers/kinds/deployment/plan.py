"""A Deployment's plan: pure, so ``reconciler plan`` and ``apply`` can never disagree.

``plan`` turns desired state, the observed container and our own record into actions, each
with its cause. It is also where adoption is decided: a container of the Deployment's name is
taken over only when it carries our labels for this resource (a container we created, or one
a crashed run left behind); any other container of that name is a conflict, left untouched.
Kept apart from the controller (``controllers.kinds.deployment.controller``), which talks to Docker,
so every rule here is tested without an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from controllers import ownership
from controllers.actions import Action
from controllers.clients.docker_client import ContainerInfo
from controllers.errors import PlanError
from controllers.kinds.deployment.promotion import Qualification, baking, override, qualifies
from controllers.kinds.deployment.readiness import exit_cause, paused_message
from controllers.kinds.host.pulls import ImageNeed
from specs.errors import SpecIssue
from specs.models import Deployment
from state.keys import Key
from state.models import Owner, ResourceStatus

Verb = Literal["pull", "load", "create", "recreate", "qualify", "rollback"]
KIND_CONTAINER = "container"
STAGED_SUFFIX = ".next"  # the replacement's name until the old container is gone
SHOWN_CHANGES = 6  # spec paths named in a cause; the rest are counted
MAX_VALUE_CHARS = 40
MAX_IMAGE_CHARS = 19



@dataclass
class Desired:
    """What one Deployment asks for, resolved against its Host (image ID, container name)."""

    deployment: Deployment
    resource: Key
    spec_hash: str
    container_name: str
    image_id: str
    env: dict[str, str]
    labels: dict[str, str]
    url: str  # as seen on the Host
    probe_url: str  # how this process reaches it (through the SSH tunnel for remote Hosts)
    source_file: str
    # The pull its image needs on the Host first (then ``image_id`` is unknown: ""), and the
    # registry digest the Host holds the image under ("" for an image built there).
    pull: ImageNeed | None = None
    image_digest: str = ""
    # Secret references whose values exist but cannot be used (located, naming the reference,
    # never the value); refused by ``plan`` when something is to be created.
    secret_issues: list[SpecIssue] = field(default_factory=list)
    # Its ``spec.promotion``'s qualification run (None without one): a change of image, model
    # or environment is qualified by it before anything is replaced.
    qualification: Qualification | None = None


@dataclass
class Plan:
    resource: Key
    actions: list[Action] = field(default_factory=list)
    conflict: str | None = None
    container: ContainerInfo | None = None
    paused: str | None = None  # why nothing is done: someone paused the container
    # The record the plan was made from (this pass's own copy): a steady-state pass reads its
    # verdict there instead of loading the record again.
    record: ResourceStatus | None = None
    # Why the candidate is not taken: its qualification did not pass (the running version
    # serves on, untouched); nothing is done until a new commit brings a new candidate.
    held: str | None = None

    @property
    def changes(self) -> bool:
        return bool(self.actions)

    @property
    def qualifying(self) -> Action | None:
        """The ``qualify`` action, when the candidate is to be measured first."""
        return next((a for a in self.actions if a.verb == "qualify"), None)

    @property
    def rolling_back(self) -> Action | None:
        """The ``rollback`` action: the promoted candidate failed during its bake."""
        return next((a for a in self.actions if a.verb == "rollback"), None)

    @property
    def promoting(self) -> bool:
        """The recreate is a promotion: the candidate passed its qualification."""
        return any(a.verb == "recreate" and PROMOTED_BY in a.cause for a in self.actions)



def staged_name(container_name: str) -> str:
    return container_name + STAGED_SUFFIX


def plan(desired: Desired, container: ContainerInfo | None, record: ResourceStatus | None,
         instance: Owner) -> Plan:
    """Pure: the actions that make ``container`` match ``desired``, each with its cause.
    Raises PlanError when something is to be created but a secret's value is unusable."""
    result = _plan(desired, container, record, instance)
    if result.changes and desired.secret_issues:
        raise PlanError(desired.secret_issues)
    return result


def _plan(desired: Desired, container: ContainerInfo | None, record: ResourceStatus | None,
          instance: Owner) -> Plan:
    result = Plan(desired.resource, container=container, record=record)
    name = desired.container_name
    if desired.pull is not None:  # first, while whatever runs goes on serving
        need = desired.pull
        result.actions.append(Action(need.verb, need.target, f"{need.cause}; from "
                                     f"{need.registry}"))
    if container is None:
        known = record is not None and record.inventory_item(KIND_CONTAINER, name) is not None
        cause = (f"container {name} is missing (removed outside the reconciler)" if known
                 else "new Deployment")
        result.actions.append(Action("create", f"container {name}", cause))
        return result
    if not ownership.is_owned(container.labels, instance, desired.resource):
        owner = ownership.why_not_ours(container.labels, instance)
        result.conflict = (f"a container named {name} already exists and is not ours ({owner}); "
                           "it is left untouched — rename or remove it, or rename the Deployment")
        return result
    causes = _changes(desired, container, record)
    if container.paused:
        result.paused = paused_message(name, causes)
        return result
    if not container.running:
        at_spec = container.labels.get(ownership.LABEL_SPEC_HASH, "") == desired.spec_hash
        down = _down(desired, container, record, at_spec)
        if isinstance(down, Action):
            result.actions.append(down)
            return result
        causes.append(down)
    if causes and desired.qualification is not None and _candidate(desired, container, record,
                                                                   causes):
        return _promotion(result, desired.qualification, name, "; ".join(causes))
    if causes:
        result.actions.append(Action("recreate", f"container {name}", "; ".join(causes)))
    return result


PROMOTED_BY = "promoted: qualification run"


def _changes(desired: Desired, container: ContainerInfo, record: ResourceStatus | None
             ) -> list[str]:
    """How the container differs from what is asked: its spec, its image."""
    causes = []
    have_hash = container.labels.get(ownership.LABEL_SPEC_HASH, "")
    if have_hash != desired.spec_hash:
        causes.append(_spec_cause(desired, record, have_hash))
    # While a pull is needed the image's ID is not known: the pass after it compares them.
    if desired.image_id and container.image_id != desired.image_id:
        causes.append(f"image changed {_short(container.image_id)} → {_short(desired.image_id)}")
    return causes


def _down(desired: Desired, container: ContainerInfo, record: ResourceStatus | None,
          at_spec: bool) -> Action | str:
    """What a container that is not running means: the cause of its recreate, or (a promoted
    candidate during its bake) the rollback to the version it replaced."""
    state = (exit_cause(container.exit_code) if container.status == "exited"
             else f"is {container.status}, not running")
    watched = baking(record, desired.spec_hash)
    if watched is not None and at_spec:
        return Action("rollback", f"container {desired.container_name}", (
            f"the promoted candidate failed its bake: container {state}; back to "
            f"{watched.promoted_from or 'the version it replaced'}"))
    return f"container {state}"


def _candidate(desired: Desired, container: ContainerInfo, record: ResourceStatus | None,
               causes: list[str]) -> bool:
    """The change is a candidate to qualify first (its image, model or environment) and there
    is a running version to compare it with, or one that was rejected or rolled back already
    (held, even if the running version stopped). A change with nothing running to compare is
    said so."""
    found = desired.qualification
    assert found is not None
    if not qualifies(record.applied_spec if record is not None else None,
                     desired.deployment.spec.model_dump(mode="json"),
                     bool(desired.image_id) and container.image_id != desired.image_id):
        return False
    if container.running or found.result not in (None, "PASS") or found.rolled_back:
        return True
    causes.append("nothing serves to compare the candidate with, so it is not qualified")
    return False


def _promotion(result: Plan, found: Qualification, name: str, why: str) -> Plan:
    """A candidate: measured first, promoted once it passed, held once it did not."""
    if found.rolled_back:
        result.held = (f"the candidate was promoted and rolled back: {found.rolled_back}; the "
                       "version it replaced serves again (a new commit is a new candidate)")
    elif found.result == "PASS":
        result.actions.append(Action("recreate", f"container {name}", f"{why}; {PROMOTED_BY} "
                                     f"{found.run_id} passed every gate"))
    elif found.approved:
        result.actions.append(Action("recreate", f"container {name}", f"{why}; {PROMOTED_BY} "
                                     f"{found.run_id} ended {found.result}, "
                                     f"{override(found).partition(': ')[0]}"))
    elif found.result is not None:
        result.held = (f"the candidate is not promoted: qualification run {found.run_id} ended "
                       f"{found.result} ({found.outcome.reason or 'no reason recorded'}); the "
                       "running version serves on, untouched (a new commit is a new candidate; "
                       f"`reconciler promote {result.resource} --rerun` measures this one "
                       f"again, `--approve {found.run_id}` lets it through)")
    else:
        result.actions.append(Action("qualify", f"container {name}", f"{why}; measured beside "
                                     f"the running version first by run {found.run_id} "
                                     f"({found.experiment}) in {found.room}; gates: "
                                     f"{found.gates}"))
    return result


def _spec_cause(desired: Desired, record: ResourceStatus | None, have_hash: str) -> str:
    old = record.applied_spec if record is not None else None
    if old is None:
        return f"spec changed (hash {have_hash[:12] or 'none'} → {desired.spec_hash[:12]})"
    new = desired.deployment.spec.model_dump(mode="json")
    changed = sorted(_diff(old, new))
    shown = ", ".join(changed[:SHOWN_CHANGES]) + (
        f" and {len(changed) - SHOWN_CHANGES} more" if len(changed) > SHOWN_CHANGES else "")
    return f"spec changed: {shown or 'defaults'}"


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out.extend(_diff(old.get(key), new.get(key), f"{prefix}{key}."))
        return out
    if old == new:
        return []
    path = prefix.rstrip(".")
    if isinstance(old, str | int | float | bool | None) and isinstance(new, str | int | float |
                                                                           bool | None):
        return [f"{path} {_fmt(old)} → {_fmt(new)}"]
    return [path]


def _fmt(value: object) -> str:
    text = "unset" if value is None else repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 3] + "..."


def _short(image_id: str) -> str:
    return image_id[:MAX_IMAGE_CHARS] + ".." if len(image_id) > MAX_IMAGE_CHARS else image_id
