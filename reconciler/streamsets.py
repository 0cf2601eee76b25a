"""StreamSet passes for the engine: resolve against the Deployment, plan, apply, delete.

Why apart from ``engine``: a StreamSet depends on a Ready Deployment (the DAG Host → Deployment
→ StreamSet), so it is planned and applied in a second phase, after its Deployment. When the
Deployment is not Ready yet the plan says so ("after Deployment/x is Ready") instead of asking a
service that is not there; the apply re-plans against fresh observations when its turn comes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from controllers.docker_client import DockerEngine
from controllers.errors import ControllerError, PermanentError
from controllers.streamhealth import SourcesDegraded
from controllers.streamplan import (
    StreamAction,
    StreamPlan,
    StreamSetDesired,
    desired_sources,
    recorded_sources,
)
from controllers.streamset import AtCapacity, StreamSetController
from specs.models import StreamSet
from specs.validate import SpecSet, spec_hash
from state.models import ResourceStatus

if TYPE_CHECKING:
    from reconciler.engine import Engine, Outcome, ResourcePlan

log = structlog.get_logger("reconciler.streamsets")


def deployment_ready(engine: Engine, ss: StreamSet, spec_set: SpecSet) -> str | None:
    """None when the StreamSet's Deployment is Ready at its current spec; else why not."""
    dep = spec_set.deployment(ss.spec.deployment)
    resource = f"Deployment/{ss.spec.deployment}"
    record = engine.store.load(resource)
    ready = record.condition("Ready") if record is not None else None
    if dep is None or record is None or ready is None or ready.status != "True":
        return f"waiting for {resource} to be Ready"
    if record.observed_generation != spec_hash(dep):
        return f"waiting for {resource} to converge to its current spec"
    return None


def resolve(engine: Engine, ss: StreamSet, spec_set: SpecSet) -> StreamSetDesired:
    dep = spec_set.deployment(ss.spec.deployment)
    assert dep is not None  # crossref guarantees it
    session = engine.session(spec_set.host(dep.spec.host))
    publisher_host = ss.spec.publisher.host or dep.spec.host
    return StreamSetDesired(
        streamset=ss, deployment=dep, resource=f"StreamSet/{ss.metadata.name}",
        spec_hash=spec_hash(ss),
        rtvi_url=session.url_for(dep.spec.port.address, dep.spec.port.host),
        publisher_host=publisher_host,
        vst_url=ss.spec.vst.url if ss.spec.vst is not None else None,
        sources=desired_sources(ss, engine.instance),
        source_file=spec_set.source_file(ss))


def controller(engine: Engine, spec_set: SpecSet | None) -> StreamSetController:
    def engine_for(host_name: str) -> DockerEngine:
        return engine.session(engine.host_for(spec_set, host_name, None)).engine()
    return StreamSetController(engine.store, engine.instance, engine_for, engine.hub,
                               engine.progress)


def plan_one(engine: Engine, ss: StreamSet, spec_set: SpecSet,
             waiting: str | None) -> ResourcePlan:
    """Plan a StreamSet; with ``waiting`` (its Deployment is not Ready) plan from the record."""
    from reconciler.engine import ResourcePlan

    rp = ResourcePlan(f"StreamSet/{ss.metadata.name}", ss.metadata.name)
    try:
        desired = resolve(engine, ss, spec_set)
        rp.desired = desired
        if waiting is not None:
            rp.plan = _pending_plan(desired, engine.store.load(desired.resource), waiting)
            return rp
        rp.plan = controller(engine, spec_set).plan(desired)
    except ControllerError as exc:
        rp.error, rp.error_reason = str(exc), "ObserveFailed"
        rp.permanent = isinstance(exc, PermanentError)
    return rp


def _pending_plan(desired: StreamSetDesired, record: ResourceStatus | None,
                  waiting: str) -> StreamPlan:
    recorded = recorded_sources(record)
    result = StreamPlan(desired.resource)
    for name in sorted(set(recorded) - set(desired.sources)):
        result.actions.append(StreamAction("remove", name, f"no longer in the spec ({waiting})"))
    for name, src in desired.sources.items():
        if recorded.get(name, {}).get("hash") != src.hash:
            result.actions.append(StreamAction("register", name, f"new or changed source "
                                               f"({waiting})"))
    return result


def apply_one(engine: Engine, rp: ResourcePlan, spec_set: SpecSet,
              timeout_s: float | None) -> Outcome:
    from reconciler.engine import Outcome

    desired = rp.desired
    assert isinstance(desired, StreamSetDesired)
    ss = desired.streamset
    waiting = deployment_ready(engine, ss, spec_set)
    if waiting is not None:
        engine.fail(rp, "WaitingForDeployment", waiting, stalled=False)
        return Outcome(rp.resource, False, waiting, retry=True)
    ctl = controller(engine, spec_set)
    try:
        the_plan = ctl.plan(desired)
        result = ctl.apply(desired, the_plan, timeout_s, engine.revision)
    except SourcesDegraded as exc:
        engine.fail(rp, "SourcesDegraded", str(exc), stalled=False,
                    ready="False")
        return Outcome(rp.resource, False, f"SourcesDegraded: {exc}", retry=True)
    except AtCapacity as exc:
        engine.fail(rp, "AtCapacity", str(exc), stalled=False, ready="False")
        return Outcome(rp.resource, False, f"AtCapacity: {exc}", retry=True)
    except ControllerError as exc:
        permanent = isinstance(exc, PermanentError)
        reason = "ApplyFailed" if permanent else "TemporaryFailure"
        engine.fail(rp, reason, str(exc), stalled=permanent)
        return Outcome(rp.resource, False, f"{reason}: {exc}", retry=not permanent)
    log.info("resource.ready", resource=rp.resource, sources=len(result.sources),
             actions=[str(a) for a in the_plan.actions], waited_s=round(result.waited_s, 2))
    message = f"Ready: {len(result.sources)} source(s) with fresh frames"
    if ss.spec.captions is not None:
        message += " and captions"
    if the_plan.changes:
        engine.store.events.append(rp.resource, "Normal", "Ready",
                                   f"ready after {result.waited_s:.1f}s")
    else:
        message += " (no changes)"
    return Outcome(rp.resource, True, message)


def delete_one(engine: Engine, spec_set: SpecSet | None, record: ResourceStatus) -> Outcome:
    """Tear down every source recorded for a StreamSet (contract order), then forget it."""
    from reconciler.engine import Outcome

    names = sorted({i.name for i in record.inventory} | set(recorded_sources(record)))
    rtvi = record.facts.get("rtvi")
    dep = engine.store.load(f"Deployment/{record.facts.get('deployment')}")
    if dep is None or not dep.inventory:
        rtvi = None  # the service is gone: its streams went with it
    spec = record.applied_spec or {}
    raw = spec.get("teardown")
    teardown: dict[str, object] = raw if isinstance(raw, dict) else {}
    try:
        ctl = controller(engine, spec_set)
        left = ctl.teardown(record.resource, names, str(rtvi) if rtvi else None,
                            _int(teardown.get("drainTimeoutSeconds"), 30),
                            _int(teardown.get("deadlineSeconds"), 300))
    except ControllerError as exc:
        return Outcome(record.resource, False, f"cannot tear down yet: {exc}",
                       retry=not isinstance(exc, PermanentError))
    for line in left:
        engine.store.events.append(record.resource, "Warning", "LeftBehind", line)
    if left:
        return Outcome(record.resource, False, "left behind: " + "; ".join(left), retry=True)
    engine.store.delete(record.resource)
    engine.store.events.append(record.resource, "Normal", "Deleted",
                               f"removed {len(names)} source(s)")
    return Outcome(record.resource, True, f"deleted {len(names)} source(s): streams, sensors "
                                          "and publishers")


def _int(value: object, default: int) -> int:
    return int(value) if isinstance(value, int | float) else default


__all__ = ["apply_one", "delete_one", "deployment_ready", "plan_one", "resolve"]
