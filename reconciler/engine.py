"""Reconcile passes over a spec set: observe Hosts, plan Deployments, apply, prune.

Shared by ``plan`` (observe + plan, never acts), ``apply`` (observe + plan + act + wait) and the
daemon (the same steps, one work-queue key at a time), so they cannot drift apart. Hosts are
observed first (dependency order: Host → Deployment); a Deployment whose Host is unreachable is
Degraded, never deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from controllers.captions import CaptionHub
from controllers.deployment import (
    DeploymentController,
    Desired,
    Plan,
    remove_owned,
    resolve_desired,
)
from controllers.errors import ControllerError, PermanentError, PlanError, ReadinessFailed
from controllers.session import HostSession
from controllers.streamplan import StreamPlan, StreamSetDesired
from reconciler import streamsets
from specs.errors import SpecIssue
from specs.models import Deployment, Host
from specs.validate import SpecSet, spec_hash
from state.models import ResourceStatus
from state.store import Store

MAX_PARALLEL_APPLIES = 16  # readiness waits are I/O-bound; a fleet converges together
RUNTIME_DIR_NAME = "run"
log = structlog.get_logger("reconciler.engine")
Progress = Callable[[str, str], None]


@dataclass
class ResourcePlan:
    """The plan for one resource, or why it cannot be planned."""

    resource: str
    name: str
    desired: Desired | StreamSetDesired | None = None
    plan: Plan | StreamPlan | None = None
    issues: list[SpecIssue] = field(default_factory=list)
    error: str | None = None
    error_reason: str = ""
    permanent: bool = True

    @property
    def changes(self) -> bool:
        return self.plan is not None and self.plan.changes


@dataclass
class Outcome:
    """How one pass over a resource ended. ``retry``: worth another try with backoff (the
    world may change: a Host returns, a crashing service gets its GPU memory back), as
    opposed to waiting for a spec change (Stalled)."""

    resource: str
    ok: bool
    message: str
    retry: bool = False


class Engine:
    def __init__(self, store: Store, instance: str, progress: Progress,
                 revision: str | None = None) -> None:
        self.store = store
        self.instance = instance
        self.progress = progress
        self.revision = revision
        self.sessions: dict[str, HostSession] = {}
        self._sessions_lock = threading.Lock()
        self.host_errors: dict[str, str] = {}
        self._hosts_refused: set[str] = set()  # permanent (e.g. unknown host key), not transient
        self.hub = CaptionHub()  # live caption sessions outlive a pass (the daemon keeps them)

    def close(self) -> None:
        self.hub.close()
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()

    # --- Hosts -------------------------------------------------------------------------------

    def session(self, host: Host) -> HostSession:
        """The live session of a Host, replaced when its spec changed."""
        with self._sessions_lock:
            current = self.sessions.get(host.metadata.name)
            if current is not None and current.host == host:
                return current
            if current is not None:
                current.close()
            session = HostSession(host, self.store.root / RUNTIME_DIR_NAME)
            self.sessions[host.metadata.name] = session
            return session

    def observe_host(self, host: Host, record: bool = True) -> bool:
        """Observe one Host and (unless ``record`` is off, as for ``plan``, which must not
        write) record its status; False when it is unreachable."""
        name = host.metadata.name
        session = self.session(host)
        try:
            facts = session.observe()
        except ControllerError as exc:
            self.host_errors[name] = str(exc)
            if isinstance(exc, PermanentError):
                self._hosts_refused.add(name)
            if record:
                self._record_host(host, None, str(exc), isinstance(exc, PermanentError))
            return False
        self.host_errors.pop(name, None)
        self._hosts_refused.discard(name)
        if record:
            self._record_host(host, facts.model_dump(mode="json"), "", False)
        return True

    def _record_host(self, host: Host, facts: dict[str, object] | None, error: str,
                     permanent: bool) -> None:
        resource = f"Host/{host.metadata.name}"
        before = self.store.load(resource)
        was_ready = before is not None and (c := before.condition("Ready")) is not None and (
            c.status == "True")

        digest = spec_hash(host)

        def mutate(st: ResourceStatus) -> None:
            st.applied_revision = self.revision or st.applied_revision
            st.applied_spec = host.spec.model_dump(mode="json")
            st.desired_generation = digest
            if facts is not None:  # observed at this spec: in sync
                st.observed_generation = digest
            st.facts["docker"] = host.spec.docker
            if facts is not None:
                st.facts.update({"reachable": True, "engineVersion": facts["engine_version"],
                                 "apiVersion": facts["api_version"], "os": facts["os"],
                                 "gpus": facts["gpus"] or "none", "gpuProbe": facts["gpu_probe"]})
                st.set_condition("Ready", "True", "Reachable",
                                 f"Docker {facts['engine_version']} answers")
                st.set_condition("Degraded", "False", "Reachable", "")
                st.set_condition("Stalled", "False", "Reachable", "")
            else:
                st.facts["reachable"] = False
                reason = "Refused" if permanent else "Unreachable"
                st.set_condition("Ready", "False", reason, error)
                st.set_condition("Stalled" if permanent else "Degraded", "True", reason, error)
        self.store.update(resource, "Host", host.metadata.name, mutate)
        if facts is None and (was_ready or before is None):
            self.store.events.append(resource, "Warning", "Unreachable", error)
        elif facts is not None and not was_ready and before is not None:
            self.store.events.append(resource, "Normal", "Reachable", "Host answers again")

    def observe_hosts(self, spec_set: SpecSet, record: bool) -> None:
        needed = {d.spec.host for d in spec_set.deployments}
        needed |= {s.spec.publisher.host for s in spec_set.streamsets if s.spec.publisher.host}
        for host in spec_set.hosts:
            if host.metadata.name in needed:
                self.observe_host(host, record)

    # --- planning ----------------------------------------------------------------------------

    def record_observed(self, spec_set: SpecSet) -> None:
        """Record what the last ``plan`` saw of each Host (apply does, once the plan is
        accepted; ``plan`` itself never writes)."""
        for host in spec_set.hosts:
            session = self.sessions.get(host.metadata.name)
            error = self.host_errors.get(host.metadata.name)
            if error is not None:
                self._record_host(host, None, error, host.metadata.name in self._hosts_refused)
            elif session is not None and session.facts is not None:
                self._record_host(host, session.facts.model_dump(mode="json"), "", False)

    def plan(self, spec_set: SpecSet) -> list[ResourcePlan]:
        """Plan every Deployment, then every StreamSet; read-only (Host observations are kept
        in memory). A StreamSet whose Deployment will change is planned from its record."""
        self.observe_hosts(spec_set, record=False)
        plans = [self.plan_one(dep, spec_set) for dep in spec_set.deployments]
        unsettled = {rp.name for rp in plans if rp.error is not None or rp.changes}
        for ss in spec_set.streamsets:
            waiting = (f"after Deployment/{ss.spec.deployment} is Ready"
                       if ss.spec.deployment in unsettled
                       else streamsets.deployment_ready(self, ss, spec_set))
            plans.append(streamsets.plan_one(self, ss, spec_set, waiting))
        return plans

    def plan_one(self, dep: Deployment, spec_set: SpecSet) -> ResourcePlan:
        rp = ResourcePlan(f"Deployment/{dep.metadata.name}", dep.metadata.name)
        host_name = dep.spec.host
        if host_name in self.host_errors:
            rp.error = self.host_errors[host_name]
            rp.error_reason, rp.permanent = "HostUnavailable", False
            return rp
        session = self.session(spec_set.host(host_name))
        try:
            rp.desired = resolve_desired(dep, spec_set, session, self.instance, self.store)
            rp.plan = self._controller(session).plan(rp.desired)
        except PlanError as exc:
            rp.issues, rp.error, rp.error_reason = exc.issues, str(exc), "PlanRejected"
        except ControllerError as exc:
            rp.error, rp.error_reason = str(exc), "ObserveFailed"
            rp.permanent = isinstance(exc, PermanentError)
        return rp

    def _controller(self, session: HostSession) -> DeploymentController:
        return DeploymentController(session, self.store, self.instance, self.progress)

    # --- applying ----------------------------------------------------------------------------

    def apply(self, plans: list[ResourcePlan], timeout_s: float | None,
              spec_set: SpecSet) -> list[Outcome]:
        """Deployments first, then StreamSets: dependency order."""
        first = [rp for rp in plans if not isinstance(rp.desired, StreamSetDesired)]
        second = [rp for rp in plans if isinstance(rp.desired, StreamSetDesired)]
        with ThreadPoolExecutor(max_workers=MAX_PARALLEL_APPLIES) as pool:
            outcomes = list(pool.map(lambda rp: self.apply_one(rp, timeout_s), first))
            if second:
                outcomes += pool.map(lambda rp: self.apply_streamset(rp, spec_set, timeout_s),
                                     second)
        return outcomes

    def apply_streamset(self, rp: ResourcePlan, spec_set: SpecSet,
                        timeout_s: float | None) -> Outcome:
        if rp.desired is None:
            message = rp.error or "not planned"
            self.fail(rp, rp.error_reason or "Error", message, rp.permanent)
            return Outcome(rp.resource, False, message, retry=not rp.permanent)
        return streamsets.apply_one(self, rp, spec_set, timeout_s)

    def apply_one(self, rp: ResourcePlan, timeout_s: float | None) -> Outcome:
        if isinstance(rp.desired, StreamSetDesired) or isinstance(rp.plan, StreamPlan):
            raise TypeError("StreamSets are applied with apply_streamset")
        if rp.desired is None or rp.plan is None:
            message = rp.error or "not planned"
            self.fail(rp, rp.error_reason or "Error", message, rp.permanent)
            return Outcome(rp.resource, False, message, retry=not rp.permanent)
        if rp.plan.conflict is not None:
            self.fail(rp, "Conflict", rp.plan.conflict, True)
            return Outcome(rp.resource, False, f"Conflict: {rp.plan.conflict}")
        session = self.sessions[rp.desired.deployment.spec.host]
        try:
            result = self._controller(session).apply(rp.desired, rp.plan, timeout_s,
                                                     self.revision)
        except ReadinessFailed as exc:
            self.fail(rp, exc.reason, str(exc), True)
            return Outcome(rp.resource, False, f"{exc.reason}: {exc}", retry=True)
        except ControllerError as exc:
            permanent = isinstance(exc, PermanentError)
            reason = "ApplyFailed" if permanent else "TemporaryFailure"
            self.fail(rp, reason, str(exc), permanent)
            return Outcome(rp.resource, False, f"{reason}: {exc}", retry=not permanent)
        log.info("resource.ready", resource=rp.resource, model=result.model_id,
                 url=rp.desired.url, actions=[str(a) for a in rp.plan.actions],
                 waited_s=round(result.waited_s, 2), revision=self.revision)
        message = f"Ready: serving {result.model_id} at {rp.desired.url}"
        if not rp.plan.changes:
            message += " (no changes)"
        else:
            self.store.events.append(rp.resource, "Normal", "Ready",
                                     f"ready after {result.waited_s:.1f}s")
        return Outcome(rp.resource, True, message)

    def fail(self, rp: ResourcePlan, reason: str, message: str, stalled: bool,
             ready: Literal["False", "Unknown"] | None = None) -> None:
        """Record a failed pass: Stalled (permanent) or Degraded (will be retried). ``ready``
        overrides Ready's status (a StreamSet with dead sources is known not to be Ready)."""
        before = self.store.load(rp.resource)
        previous = before.condition("Ready") if before is not None else None

        def mutate(st: ResourceStatus) -> None:
            st.set_condition("Ready", ready or ("False" if stalled else "Unknown"), reason,
                             message)
            st.set_condition("Progressing", "False", reason, "")
            st.set_condition("Stalled" if stalled else "Degraded", "True", reason, message)
            if rp.desired is not None:
                st.desired_generation = rp.desired.spec_hash
        self.store.update(rp.resource, rp.resource.split("/", 1)[0], rp.name, mutate)
        if previous is None or (previous.reason, previous.message) != (reason, message):
            self.store.events.append(rp.resource, "Warning", reason, message)
        else:  # the same failure again (a retry): say so briefly rather than repeat it
            self.store.events.append(rp.resource, "Warning", "RetryFailed", reason)
        log.warning("resource.failed", resource=rp.resource, reason=reason, message=message)

    # --- deleting ----------------------------------------------------------------------------

    def delete(self, spec_set: SpecSet | None, names: list[str]) -> list[Outcome]:
        """Prune what we own for the named resources (from specs or the store)."""
        return [self.delete_one(spec_set, name) for name in names]

    def delete_one(self, spec_set: SpecSet | None, resource: str) -> Outcome:
        record = self.store.load(resource)
        if record is None:
            return Outcome(resource, True, "nothing recorded; nothing to delete")
        if record.kind == "Host":
            self.store.delete(resource)
            return Outcome(resource, True, "forgot the Host (nothing of it is ours to delete)")
        if record.kind == "StreamSet":
            return streamsets.delete_one(self, spec_set, record)
        host_name = str(record.facts.get("host") or _host_of(record))
        try:
            session = self.session(self.host_for(spec_set, host_name, record))
            removed, left = remove_owned(session.engine(), self.store, self.instance, resource,
                                         record)
        except ControllerError as exc:
            return Outcome(resource, False, f"cannot prune yet: {exc}",
                           retry=not isinstance(exc, PermanentError))
        for line in removed:
            self.store.events.append(resource, "Normal", "Deleted", f"removed {line}")
        for line in left:
            self.store.events.append(resource, "Warning", "LeftAlone", line)
        if not left:
            self.store.delete(resource)
        detail = "; ".join(removed + left) or "nothing owned"
        return Outcome(resource, not left, f"deleted: {detail}")

    def host_for(self, spec_set: SpecSet | None, host_name: str,
                 record: ResourceStatus | None) -> Host:
        if spec_set is not None:
            for host in spec_set.hosts:
                if host.metadata.name == host_name:
                    return host
        session = self.sessions.get(host_name)
        if session is not None:
            return session.host
        host_record = self.store.load(f"Host/{host_name}")
        spec = host_record.applied_spec if host_record is not None else None
        if spec is None and record is not None:
            url = record.facts.get("dockerUrl")
            spec = {"docker": url} if url else {}
        return Host.model_validate({"apiVersion": "rtvi.reconciler/v1", "kind": "Host",
                                    "metadata": {"name": host_name}, "spec": spec or {}})


def _host_of(record: ResourceStatus) -> str:
    for item in record.inventory:
        return item.host
    return "local"


def runtime_dir(store: Store) -> Path:
    return store.root / RUNTIME_DIR_NAME
