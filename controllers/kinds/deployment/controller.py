"""The Deployment controller: observe → plan (pure) → act → report.

One RT-VLM service container per Deployment. The plan is a pure function of desired state,
observed state and our own record, so ``reconciler plan`` and ``reconciler apply`` can never
disagree about what would happen and why. Acting records intent in the inventory *before*
creating (write-ahead) so a crash between "created" and "recorded" leaves a container we still
recognise by name and labels.

A recreate never removes the working container before its replacement exists: the replacement
is created under a staged name (``<name>.next``; a dot cannot occur in a Deployment's name, so
no other resource's container can be called that) while the old one still runs — Docker binds
ports and GPUs only at start, so two created containers always coexist — then the old one is
stopped and removed, the new one renamed to the final name and started. Every step is recorded
in the inventory first, so after a kill -9 at any point a delete finds what exists, and the
next apply removes a leftover staged container (by name and our labels) before staging again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from controllers import ownership
from controllers.actions import Action
from controllers.clients.docker_client import ContainerInfo, ContainerRequest
from controllers.clients.http_api import service_url
from controllers.errors import (
    ContainerPaused,
    ControllerError,
    PermanentError,
    PlanError,
    ReadinessFailed,
    ReadinessTimedOut,
    SecretRefused,
    SecretUnavailable,
    StillProgressing,
    TemporaryError,
)
from controllers.kinds.deployment.facts import DeploymentStatusFacts, RuntimeFacts
from controllers.kinds.deployment.hostports import port_holders
from controllers.kinds.deployment.images import host_image, pull_refused
from controllers.kinds.deployment.plan import KIND_CONTAINER, Desired, Plan, plan, staged_name
from controllers.kinds.deployment.promotion import qualification
from controllers.kinds.deployment.readiness import (
    ReadinessResult,
    started_epoch,
    still_serving,
    wait_ready,
)
from controllers.kinds.host.hostview import HostView
from controllers.kinds.host.pulls import Pulls
from controllers.kinds.host.session import HostSession
from controllers.secrets import api_token, resolve, resolve_all
from controllers.waiting import until
from specs.environment import effective_env
from specs.facts import HostFacts
from specs.hostrules import check_against_host, check_gpu_exclusivity
from specs.models import Deployment
from specs.rules import R4, R10, R_PORT_FREE, R_SECRET_VALUE, Finding, covering_mount
from specs.trust import R_TRUST
from specs.validate import SpecSet, spec_hash
from state.keys import Key
from state.models import HistoryEntry, InventoryItem, Owner, ResourceStatus, utc_now
from state.store import Store

GPU_RELEASE_TIMEOUT_S = 120
GPU_RELEASE_POLL_S = 1.0
# The daemon waits for readiness this long per pass, then frees the worker and looks again.
READINESS_SLICE_S = 5.0
PROGRESS_STEP_S = 5
Progress = Callable[[str], None]


def resolve_desired(dep: Deployment, spec_set: SpecSet, session: HostSession,
                    instance: Owner, store: Store | None = None,
                    pulls: Pulls | None = None) -> Desired:
    """Judge the Deployment against its Host's facts (and, with ``store``, against what earlier
    runs left running) and resolve its image: present on the Host, or a pull it needs first
    (with ``pulls``, a tag that moved in its registry needs one too); PlanError if a rule
    that needs observation fails."""
    engine, facts = session.engine(), session.facts or session.observe()
    findings: list[Finding] = check_against_host(dep, facts)
    on_host = [d for d in spec_set.deployments if d.spec.host == dep.spec.host]
    findings += [f for d, f in check_gpu_exclusivity(on_host, facts) if d is dep]
    if store is not None:
        findings += gpus_held_by_others(dep, spec_set, store, facts)
    view = session.view()
    findings += port_taken(dep, session, view,
                           ownership.container_name(instance, dep.metadata.name))
    found = host_image(dep, session, view, pulls)
    image, need = found.image, found.need
    if need is not None and (refused := pull_refused(need)) is not None:
        findings.append(Finding(("spec", "image"), f"image {dep.spec.image}: {need.cause}, "
                                f"and {refused}", R_TRUST))
    elif (path := dep.spec.model.implementationPath) is not None and image is not None and (
            need is None) and covering_mount(dep.spec, path) is None and not (
            engine.path_in_image(image.id, path)):
        findings.append(Finding(("spec", "model", "implementationPath"), f"{path} does not exist "
                                f"inside image {dep.spec.image} and no spec.mounts entry provides "
                                "it", R4))
    if findings:
        # A port held by another process frees without an event: retried with backoff.
        raise PlanError([spec_set.issue(dep, f) for f in findings],
                        transient=all(f.rule == R_PORT_FREE for f in findings))
    resource = Key("Deployment", dep.metadata.name)
    digest = spec_hash(dep)
    return Desired(
        deployment=dep,
        resource=resource,
        spec_hash=digest,
        container_name=ownership.container_name(instance, dep.metadata.name),
        image_id=image.id if image is not None and need is None else "",
        pull=need,
        image_digest=found.digest,
        env=effective_env(dep.spec),
        labels=ownership.labels_for(instance, resource, digest),
        url=service_url(dep.spec.port.address, dep.spec.port.host),
        probe_url=session.url_for(dep.spec.port.address, dep.spec.port.host),
        source_file=spec_set.source_file(dep),
        secret_issues=[spec_set.issue(dep, f) for f in unusable_secrets(dep)],
        qualification=None if store is None else qualification(dep, spec_set, store),
    )


def port_taken(dep: Deployment, session: HostSession, view: HostView,
               container_name: str) -> list[Finding]:
    """The Deployment's host port, if another container or (local Hosts) a process holds it."""
    port = dep.spec.port
    holders = port_holders(view.published, port.address, port.host,
                           {container_name, staged_name(container_name)},
                           view.container(container_name), local=not session.host.is_ssh)
    return [Finding(("spec", "port", "host"), f"host port {port.host} is taken on Host "
                    f"{session.name}: {holder}; free it or choose another port.host", R_PORT_FREE)
            for holder in holders]


def unusable_secrets(dep: Deployment) -> list[Finding]:
    """Resolve every secret reference once to judge its value (and register it for
    redaction): one that exists but cannot be used is found before anything is removed. A
    missing one is not judged here: a running container does not need it (``apply`` says so
    when it does)."""
    findings = []
    for i, ref in enumerate(dep.spec.secrets):
        try:
            resolve(ref)
        except SecretRefused as exc:
            findings.append(Finding(("spec", "secrets", i), str(exc), R_SECRET_VALUE))
        except SecretUnavailable:
            continue
    return findings


def gpus_held_by_others(dep: Deployment, spec_set: SpecSet, store: Store,
                        facts: HostFacts) -> list[Finding]:
    """Rule 10 across runs: a GPU still held by a Deployment applied earlier (from another
    spec set, or one the daemon has not pruned yet) is not free. Deployments in ``spec_set``
    are compared with each other by ``check_gpu_exclusivity``."""
    wanted = {g.uuid: i for i, ref in enumerate(dep.spec.gpus) if (g := facts.gpu(ref))}
    if not wanted:
        return []
    in_set = {Key("Deployment", d.metadata.name) for d in spec_set.deployments}
    findings = []
    for record in store.list():
        if (record.kind != "Deployment" or record.resource in in_set or not record.inventory
                or DeploymentStatusFacts.of(record).host != facts.name):
            continue
        held = (record.applied_spec or {}).get("gpus") or []
        for ref in held if isinstance(held, list) else []:
            gpu = facts.gpu(ref)
            if gpu is not None and gpu.uuid in wanted:
                where = f" (from {record.source_file})" if record.source_file else ""
                findings.append(Finding(("spec", "gpus", wanted[gpu.uuid]),
                                        f"GPU {gpu.index} ({gpu.uuid}) is held by {record.resource}"
                                        f"{where}, which is still deployed; delete it first", R10))
    return findings


class DeploymentController:
    """Acts on one Host for a set of Deployments, recording everything in the store."""

    def __init__(self, session: HostSession, store: Store, instance: Owner,
                 progress: Callable[[str, str], None],
                 stop: threading.Event | None = None) -> None:
        self.session = session
        self.stop = stop  # set: every wait ends at once (Stopped); the daemon is shutting down
        self.engine = session.engine()
        self.facts = session.facts or session.observe()
        self.store = store
        self.instance = instance
        self._progress = progress

    def observe(self, desired: Desired) -> ContainerInfo | None:
        return self.session.view().container(desired.container_name)

    def plan(self, desired: Desired) -> Plan:
        return plan(desired, self.observe(desired), self.store.load(desired.resource),
                    self.instance)

    def apply(self, desired: Desired, the_plan: Plan, timeout_s: float | None,
              revision: str | None = None, phased: bool = False) -> ReadinessResult:
        """Carry out the plan, then wait for readiness; raises ReadinessFailed/ControllerError.

        ``phased`` (the daemon): wait at most READINESS_SLICE_S, then raise StillProgressing
        so the worker is free while a model loads; the budget counts from the container's
        start, across passes. A service already proven ready at this spec, with nothing to
        do, is only checked (``still_serving``) and nothing is written."""
        resource = desired.resource
        if the_plan.paused is not None:
            self._record_paused(desired, the_plan.paused)
            raise ContainerPaused(the_plan.paused)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        # Resolve secrets every pass, before anything is removed: a missing secret must not
        # cost the running container, and the redactor must know every value the container
        # may echo into the logs that readiness reads (even when nothing is recreated).
        secret_env = self._secrets(desired, needed=the_plan.changes, deadline=deadline)
        self.record_desired(desired, the_plan.record)
        stopped: float | None = None  # when the old container began to stop (a recreate)
        for action in the_plan.actions:
            self._progress(resource, f"{action.verb} {action.target} because {action.cause}")
            old = the_plan.container if action.verb == "recreate" else None
            container_id, began = self._replace(desired, secret_env, old)
            stopped = began if began is not None else stopped
            self.history(resource, action, "ok", detail=container_id[:12])
            self.store.events.append(resource, "Normal", action.verb.capitalize() + "d",
                                     str(action))
        container = (the_plan.container if not the_plan.changes
                     else self.engine.container(desired.container_name))
        if container is None:
            raise TemporaryError(f"container {desired.container_name} vanished after apply")
        # The steady state: proven ready at this spec in this very container, still serving.
        # ``the_plan.record``: as this pass read it (only this pass writes the verdict).
        proven = not the_plan.changes and _proven_at(desired, container, the_plan.record)
        if proven and still_serving(container, desired.probe_url,
                                    api_token(desired.deployment.spec)):
            assert the_plan.record is not None
            return ReadinessResult(DeploymentStatusFacts.of(the_plan.record).model or "", 0.0)
        # A proven service whose one health check failed (a blip, a slow answer under load)
        # is proven again before anything is said: if it is ready at once, the record already
        # says all there is and nothing is written.
        result = self._wait_ready(desired, container, timeout_s, phased, reproving=proven)
        result.facts = self._ready_facts(desired, container, result, revision)
        if stopped is not None:
            result.gap_s = time.monotonic() - stopped
        return result

    def _wait_ready(self, desired: Desired, container: ContainerInfo, timeout_s: float | None,
                    phased: bool, reproving: bool = False) -> ReadinessResult:
        """``reproving``: a service proven ready at this spec whose one steady-state check
        failed: nothing is announced, and it gets a slice of its own."""
        resource = desired.resource
        readiness = desired.deployment.spec.readiness
        budget = float(readiness.timeoutSeconds)
        if timeout_s is not None:
            budget = min(budget, timeout_s)
        elapsed = 0.0
        if phased:
            if not container.started_at:  # from a list row (hostview): ask for the time
                container = self.engine.container(container.id) or container
            started = started_epoch(container)
            elapsed = max(0.0, time.time() - started) if started is not None else 0.0
        left = max(0.0, budget - elapsed)
        if reproving:
            # A proven service re-proven after one failed check: its budget counted from its
            # container's start is long spent, and none left meant one blip was a timeout.
            left = max(left, min(budget, READINESS_SLICE_S))
        window = min(left, READINESS_SLICE_S) if phased else left
        if not reproving:
            self._set(resource, "Progressing", "True", "WaitingForReadiness",
                      f"waiting up to {budget:g}s for {desired.url}")
        try:
            return wait_ready(self.engine, container.id, desired.probe_url, window,
                              readiness.pollSeconds, lambda msg: self._progress(resource, msg),
                              self.stop, api_token(desired.deployment.spec))
        except ReadinessTimedOut as exc:
            if window >= left:
                raise ReadinessTimedOut(budget, exc.detail) from None
            # Shown by `status` while the model loads; in steps, so the record is rewritten
            # every PROGRESS_STEP_S at most, not at every poll.
            waited = int((elapsed + window) // PROGRESS_STEP_S * PROGRESS_STEP_S)
            self._set(resource, "Progressing", "True", "WaitingForReadiness",
                      f"waiting for readiness: over {waited}s of {budget:g}s; {exc.detail}")
            raise StillProgressing(f"waiting for readiness ({elapsed + window:.0f}s/"
                                   f"{budget:g}s): {exc.detail}", readiness.pollSeconds) from None

    # --- acting ----------------------------------------------------------------------------

    def _secrets(self, desired: Desired, needed: bool, deadline: float | None) -> dict[str, str]:
        """Resolve (and so register for redaction) the secret references. When nothing is to
        be created an unavailable secret is not an error: the running container has its value."""
        try:
            return resolve_all(desired.deployment.spec.secrets, deadline=deadline)
        except SecretUnavailable:
            if needed:
                raise
            return {}

    def _replace(self, desired: Desired, secret_env: dict[str, str],
                 old: ContainerInfo | None) -> tuple[str, float | None]:
        """Create the new container under the staged name, and only once the engine accepted
        it stop and remove ``old``, rename the new one and start it. Returns its ID, and when
        ``old`` began to stop (``time.monotonic()``; None without one): the gap starts there."""
        staged = staged_name(desired.container_name)
        self._clear_staged(desired, staged)
        self._inventory(desired, staged, None)  # write-ahead: a create may be in flight
        try:
            container_id = self._create(desired, staged, secret_env)
        except ControllerError:
            self._forget_item(desired, staged)  # refused: nothing exists, the old one runs on
            raise
        self._inventory(desired, staged, container_id)
        stopped = None
        if old is not None:
            stopped = time.monotonic()
            self._remove(desired, old)
        self._inventory(desired, desired.container_name, container_id)
        self.engine.rename(container_id, desired.container_name)
        self._forget_item(desired, staged)
        self.engine.start(container_id)
        return container_id, stopped

    def _clear_staged(self, desired: Desired, staged: str) -> None:
        """Remove a staged container a killed run left behind; refuse to touch a foreign one."""
        leftover = self.engine.container(staged)
        if leftover is None:
            return
        if not ownership.is_owned(leftover.labels, self.instance, desired.resource):
            raise PermanentError(f"a container named {staged} already exists and is not ours; "
                                 "it is left untouched — rename or remove it")
        self.engine.remove(leftover.id)
        self._forget_item(desired, staged)

    def _create(self, desired: Desired, name: str, secret_env: dict[str, str]) -> str:
        request = container_request(desired, name, secret_env,
                                    [self._gpu_uuid(ref) for ref in desired.deployment.spec.gpus])
        container_id = self.engine.create(request)
        del request  # secret values live no longer than the create call
        return container_id

    def _inventory(self, desired: Desired, name: str, container_id: str | None) -> None:
        """Record a container: ``pending`` before its create call, ``created`` with its ID."""
        item = InventoryItem(kind=KIND_CONTAINER, name=name, host=self.facts.name,
                             id=container_id, state="created" if container_id else "pending",
                             created_at=utc_now())
        self.store.update(desired.resource,
                          lambda st: st.upsert_inventory(item))

    def _forget_item(self, desired: Desired, name: str) -> None:
        self.store.update(desired.resource,
                          lambda st: st.remove_inventory(KIND_CONTAINER, name))

    def _remove(self, desired: Desired, container: ContainerInfo) -> None:
        self.engine.stop(container.id, desired.deployment.spec.stopGraceSeconds)
        self.engine.remove(container.id)
        if desired.deployment.spec.gpus:
            self._wait_gpu_release([self._gpu_uuid(g) for g in desired.deployment.spec.gpus])

    def _wait_gpu_release(self, uuids: list[str]) -> None:
        """Rule 10: the successor starts only once the old container's GPU memory is free."""
        busy: dict[str, int] = {}

        def released() -> bool | None:
            busy.clear()
            busy.update({u: mib for u, mib in self.session.gpu_processes().items()
                         if u in uuids})
            return True if not busy else None
        if until(released, timeout_s=GPU_RELEASE_TIMEOUT_S, pace=GPU_RELEASE_POLL_S,
                 stop=self.stop) is None:
            raise TemporaryError(f"GPU memory not released after {GPU_RELEASE_TIMEOUT_S}s: "
                                 f"{busy}")

    def _gpu_uuid(self, ref: int | str) -> str:
        gpu = self.facts.gpu(ref)
        return gpu.uuid if gpu is not None else str(ref)

    # --- recording -------------------------------------------------------------------------

    def record_desired(self, desired: Desired, record: ResourceStatus | None) -> None:
        """What the record says is asked for: this spec, from this file, on this Host."""
        def mutate(st: ResourceStatus) -> None:
            st.desired_generation = desired.spec_hash
            st.source_file = desired.source_file
            known = DeploymentStatusFacts.of(st)
            known.host, known.docker_url = self.facts.name, self.engine.url
            known.put(st)
        self.store.update_unless_known(desired.resource, mutate, record)

    def _ready_facts(self, desired: Desired, container: ContainerInfo, result: ReadinessResult,
                     revision: str | None) -> Callable[[ResourceStatus], None]:
        """What a pass that found the service ready says of it: the engine writes it with the
        Ready verdict, in the pass's one write (``controllers.passstatus``)."""
        def mutate(st: ResourceStatus) -> None:
            st.observed_generation = desired.spec_hash
            st.applied_revision = revision or st.applied_revision
            st.applied_spec = desired.deployment.spec.model_dump(mode="json")
            was_ready = st.condition("Ready")
            known = DeploymentStatusFacts.of(st)
            # this container's logs only add facts: a read that came back before the log
            # follower caught up must not drop what an earlier read of them saw
            kept = (known.runtime.model_dump(exclude_none=True)
                    if known.runtime is not None and known.container_id == container.id else {})
            known.host, known.container = self.facts.name, desired.container_name
            known.container_id, known.image = container.id, desired.deployment.spec.image
            known.image_id, known.url, known.model = desired.image_id, desired.url, result.model_id
            known.image_digest = desired.image_digest or None
            if result.runtime or kept:
                known.runtime = RuntimeFacts.model_validate({**kept, **result.runtime})
            if was_ready is None or was_ready.status != "True":
                known.ready_since = utc_now()
            known.put(st)
        return mutate

    def _record_paused(self, desired: Desired, message: str) -> None:
        """Degraded (reason Paused) with how to resume. The engine records the failed pass
        (Ready False, reason Paused) from the ContainerPaused we raise next."""
        def mutate(st: ResourceStatus) -> None:
            st.desired_generation = desired.spec_hash
            st.set_condition("Degraded", "True", ContainerPaused.REASON, message)
        self.store.update(desired.resource, mutate)

    def progressing(self, resource: Key, reason: str, message: str) -> None:
        """Say what a phase under way is doing (a pull: its bytes so far)."""
        self._set(resource, "Progressing", "True", reason, message)

    def _set(self, resource: Key, ctype: Literal["Progressing"], status: Literal["True"],
             reason: str, message: str) -> None:

        def mutate(st: ResourceStatus) -> None:
            st.set_condition(ctype, status, reason, message)
        self.store.update(resource, mutate)

    def history(self, resource: Key, action: Action, result: Literal["ok", "error"],
                 detail: str = "") -> None:
        entry = HistoryEntry(time=utc_now(), action=action.verb, target=action.target,
                             cause=action.cause, result=result, detail=detail)
        self.store.update(resource, lambda st: st.add_history(entry))


def container_request(desired: Desired, name: str, secret_env: dict[str, str],
                      gpu_ids: list[str]) -> ContainerRequest:
    """The engine request for a Deployment's container (also an experiment run's service,
    which is its template's container under another name, labels and port)."""
    spec = desired.deployment.spec
    env = dict(desired.env)
    env.update(secret_env)
    return ContainerRequest(
        name=name,
        image=desired.image_id,
        labels=desired.labels,
        environment=env,
        ports={} if spec.network == "host" else {
            f"{spec.port.container}/tcp": (spec.port.address, spec.port.host)},
        mounts=[(m.source, m.target, m.readOnly) for m in spec.mounts],
        reads=[("mounts", m.source) for m in spec.mounts],
        gpu_ids=gpu_ids,
        stop_timeout=spec.stopGraceSeconds,
        network_mode="host" if spec.network == "host" else None,
    )


__all__ = [
    "DeploymentController",
    "ReadinessFailed",
    "container_request",
    "resolve_desired",
]


def _proven_at(desired: Desired, container: ContainerInfo, record: ResourceStatus | None
               ) -> bool:
    """The record says this very container was proven ready at this spec."""
    ready = record.condition("Ready") if record is not None else None
    return (record is not None and ready is not None and ready.status == "True"
            and record.observed_generation == desired.spec_hash
            and DeploymentStatusFacts.of(record).container_id == container.id)
