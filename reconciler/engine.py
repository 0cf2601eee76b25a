"""One reconcile pass over a spec set: observe Hosts, plan every Deployment, and apply.

Shared by ``plan`` (observe + plan, never acts) and ``apply`` (observe + plan + act + wait), so
the two cannot drift apart. Hosts are observed first (dependency order: Host → Deployment);
Deployments on reachable Hosts are applied concurrently, because readiness waits are long.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import structlog

from controllers import host as host_ctl
from controllers.deployment import (
    DeploymentController,
    Desired,
    Plan,
    remove_owned,
    resolve_desired,
)
from controllers.docker_client import DockerEngine
from controllers.errors import ControllerError, PermanentError, PlanError, ReadinessFailed
from specs.errors import SpecIssue
from specs.facts import HostFacts
from specs.hostrules import check_gpu_exclusivity
from specs.models import Deployment, Host
from specs.validate import SpecSet
from state.models import ResourceStatus
from state.store import Store

MAX_PARALLEL_APPLIES = 4
log = structlog.get_logger("reconciler.engine")
Progress = Callable[[str, str], None]


@dataclass
class HostView:
    host: Host
    engine: DockerEngine | None = None
    facts: HostFacts | None = None
    error: str | None = None


@dataclass
class ResourcePlan:
    """The plan for one resource, or why it cannot be planned."""

    resource: str
    name: str
    desired: Desired | None = None
    plan: Plan | None = None
    issues: list[SpecIssue] = field(default_factory=list)
    error: str | None = None
    error_reason: str = ""
    permanent: bool = True

    @property
    def changes(self) -> bool:
        return self.plan is not None and self.plan.changes


@dataclass
class Outcome:
    resource: str
    ok: bool
    message: str


class Engine:
    def __init__(self, store: Store, instance: str, progress: Progress) -> None:
        self.store = store
        self.instance = instance
        self.progress = progress
        self.hosts: dict[str, HostView] = {}

    def close(self) -> None:
        for view in self.hosts.values():
            if view.engine is not None:
                view.engine.close()

    # --- observing and planning ----------------------------------------------------------

    def observe_hosts(self, spec_set: SpecSet) -> None:
        needed = {d.spec.host for d in spec_set.deployments}
        for host in spec_set.hosts:
            if host.metadata.name not in needed:
                continue
            view = HostView(host)
            try:
                view.engine = host_ctl.connect(host)
                view.facts = host_ctl.observe(host, view.engine)
                log.info("host.observed", host=host.metadata.name,
                         engine=view.facts.engine_version, gpus=len(view.facts.gpus))
            except ControllerError as exc:
                view.error = str(exc)
            self.hosts[host.metadata.name] = view

    def plan(self, spec_set: SpecSet) -> list[ResourcePlan]:
        self.observe_hosts(spec_set)
        plans = [self._plan_one(dep, spec_set) for dep in spec_set.deployments]
        self._refuse_shared_gpus(spec_set, plans)
        return plans

    def _refuse_shared_gpus(self, spec_set: SpecSet, plans: list[ResourcePlan]) -> None:
        """Rule 10 across Deployments, with indices and UUIDs resolved by the Host's facts."""
        by_name = {rp.name: rp for rp in plans}
        for name, view in self.hosts.items():
            if view.facts is None:
                continue
            on_host = [d for d in spec_set.deployments if d.spec.host == name]
            for dep, finding in check_gpu_exclusivity(on_host, view.facts):
                rp = by_name[dep.metadata.name]
                issue = spec_set.issue(dep, finding)
                rp.issues.append(issue)
                rp.error = "\n".join(str(i) for i in rp.issues)
                rp.error_reason, rp.permanent, rp.plan = "PlanRejected", True, None

    def _plan_one(self, dep: Deployment, spec_set: SpecSet) -> ResourcePlan:
        rp = ResourcePlan(f"Deployment/{dep.metadata.name}", dep.metadata.name)
        view = self.hosts[dep.spec.host]
        if view.engine is None or view.facts is None:
            rp.error, rp.error_reason, rp.permanent = view.error, "HostUnavailable", False
            return rp
        try:
            rp.desired = resolve_desired(dep, spec_set, view.engine, view.facts, self.instance)
            controller = self._controller(view)
            rp.plan = controller.plan(rp.desired)
        except PlanError as exc:
            rp.issues, rp.error, rp.error_reason = exc.issues, str(exc), "PlanRejected"
        except ControllerError as exc:
            rp.error, rp.error_reason = str(exc), "ObserveFailed"
            rp.permanent = isinstance(exc, PermanentError)
        return rp

    def _controller(self, view: HostView) -> DeploymentController:
        assert view.engine is not None and view.facts is not None
        return DeploymentController(view.engine, view.facts, self.store, self.instance,
                                    self.progress)

    # --- applying ------------------------------------------------------------------------

    def apply(self, plans: list[ResourcePlan], timeout_s: float | None) -> list[Outcome]:
        with ThreadPoolExecutor(max_workers=MAX_PARALLEL_APPLIES) as pool:
            return list(pool.map(lambda rp: self._apply_one(rp, timeout_s), plans))

    def _apply_one(self, rp: ResourcePlan, timeout_s: float | None) -> Outcome:
        dep_name = rp.name
        if rp.desired is None or rp.plan is None:
            message = rp.error or "not planned"
            self._fail(rp.resource, dep_name, rp.error_reason or "Error", message, rp.permanent)
            return Outcome(rp.resource, False, message)
        view = self.hosts[rp.desired.deployment.spec.host]
        controller = self._controller(view)
        if rp.plan.conflict is not None:
            self._fail(rp.resource, dep_name, "Conflict", rp.plan.conflict, True)
            return Outcome(rp.resource, False, f"Conflict: {rp.plan.conflict}")
        try:
            result = controller.apply(rp.desired, rp.plan, timeout_s)
        except ReadinessFailed as exc:
            self._fail(rp.resource, dep_name, exc.reason, str(exc), True)
            return Outcome(rp.resource, False, f"{exc.reason}: {exc}")
        except ControllerError as exc:
            permanent = isinstance(exc, PermanentError)
            reason = "ApplyFailed" if permanent else "TemporaryFailure"
            self._fail(rp.resource, dep_name, reason, str(exc), permanent)
            return Outcome(rp.resource, False, f"{reason}: {exc}")
        message = f"Ready: serving {result.model_id} at {rp.desired.url}"
        if not rp.plan.changes:
            message += " (no changes)"
        else:
            self.store.events.append(rp.resource, "Normal", "Ready",
                                     f"ready after {result.waited_s:.1f}s")
        return Outcome(rp.resource, True, message)

    def _fail(self, resource: str, name: str, reason: str, message: str, stalled: bool) -> None:
        def mutate(st: ResourceStatus) -> None:
            st.set_condition("Ready", "False" if stalled else "Unknown", reason, message)
            st.set_condition("Progressing", "False", reason, "")
            st.set_condition("Stalled" if stalled else "Degraded", "True", reason, message)
        self.store.update(resource, "Deployment", name, mutate)
        self.store.events.append(resource, "Warning", reason, message)
        log.warning("resource.failed", resource=resource, reason=reason, message=message)

    # --- deleting ------------------------------------------------------------------------

    def delete(self, spec_set: SpecSet | None, names: list[str]) -> list[Outcome]:
        """Prune what we own for the named Deployments (from specs or the store)."""
        outcomes = []
        for resource in names:
            record = self.store.load(resource)
            if record is None:
                outcomes.append(Outcome(resource, True, "nothing recorded; nothing to delete"))
                continue
            host_name = str(record.facts.get("host") or _host_of(record))
            url = record.facts.get("dockerUrl")
            engine = self._engine_for(spec_set, host_name, str(url) if url else None)
            removed, left = remove_owned(engine, self.store, self.instance, resource, record)
            for line in removed:
                self.store.events.append(resource, "Normal", "Deleted", f"removed {line}")
            for line in left:
                self.store.events.append(resource, "Warning", "LeftAlone", line)
            if not left:
                self.store.delete(resource)
            detail = "; ".join(removed + left) or "nothing owned"
            outcomes.append(Outcome(resource, not left, f"deleted: {detail}"))
        return outcomes

    def _engine_for(self, spec_set: SpecSet | None, host_name: str,
                    url: str | None) -> DockerEngine:
        view = self.hosts.get(host_name)
        if view is not None and view.engine is not None:
            return view.engine
        host = None
        if spec_set is not None:
            host = next((h for h in spec_set.hosts if h.metadata.name == host_name), None)
        if host is None:
            spec = {"docker": url} if url else {}
            host = Host.model_validate({"apiVersion": "rtvi.reconciler/v1", "kind": "Host",
                                        "metadata": {"name": host_name or "local"},
                                        "spec": spec})
        engine = host_ctl.connect(host)
        self.hosts[host_name] = HostView(host, engine=engine)
        return engine


def _host_of(record: ResourceStatus) -> str:
    for item in record.inventory:
        return item.host
    return "local"
