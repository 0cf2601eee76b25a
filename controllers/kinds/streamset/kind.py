"""StreamSet: live RTSP sources registered with VST and RTVI
(``controllers.kinds.streamset.controller``).

Depends on its Deployment (and on its publisher's Host): while the Deployment is not Ready at
its current spec (``PassContext.waiting_for``, from the declared references) the StreamSet is
planned from its record ("after Deployment/x is Ready") and the engine holds its ``act``
(``WaitingForDeployment``, no backoff; the Deployment's success wakes it). A Deployment about
to change in the same run (``PassContext.pending``) counts as not Ready.
"""

from __future__ import annotations

import structlog
from pydantic import ValidationError

from controllers.contract import (
    PassContext,
    Report,
    ResourcePlan,
    Result,
    Runtime,
    declared_references,
    done,
    guarded,
    retry,
    unplanned,
)
from controllers.errors import ControllerError
from controllers.facts import Facts
from controllers.kinds.host.fleet import Hosts
from controllers.kinds.host.session import HostSession
from controllers.kinds.streamset.controller import AtCapacity, StreamSetController
from controllers.kinds.streamset.facts import StreamSetStatusFacts
from controllers.kinds.streamset.framewatch import FrameWatch
from controllers.kinds.streamset.health import SourcesDegraded
from controllers.kinds.streamset.part import Streaming
from controllers.kinds.streamset.plan import (
    StreamPlan,
    StreamSetDesired,
    desired_sources,
    recorded_sources,
    source_action,
)
from controllers.secrets import api_token
from controllers.services import Services
from specs.declarations import STREAMSET
from specs.models import Deployment, DeploymentSpec, StreamSet, TeardownSpec
from specs.validate import SpecSet, spec_hash
from state.keys import Key
from state.models import ResourceStatus

log = structlog.get_logger("reconciler.kinds")


StreamSetPlan = ResourcePlan[StreamSetDesired, StreamPlan]


class StreamSetKind:
    name = "StreamSet"
    spec = STREAMSET
    owns = True
    max_parallel: int | None = None

    def references(self, resource: StreamSet) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        deployment = StreamSetStatusFacts.of(record).deployment
        return [Key("Deployment", deployment)] if deployment else []

    def plan(self, ctx: PassContext, resource: StreamSet) -> StreamSetPlan:
        assert ctx.spec_set is not None  # a pass that plans has its spec set
        gate = ctx.waiting_for(self.spec, resource)
        waiting = gate[1] if gate is not None else None
        rp = StreamSetPlan(Key("StreamSet", resource.metadata.name), resource.metadata.name,
                           waiting=waiting)
        with rp.observing():
            desired = _resolve(ctx, resource, ctx.spec_set)
            rp.desired = desired
            ctx.clients.authorize(desired.rtvi_url, api_token(desired.deployment.spec))
            if waiting is not None:
                record = ctx.services.store.load(desired.resource)
                rp.plan = _pending_plan(desired, record, waiting)
                return rp
            rp.plan = _controller(ctx).plan(desired)
        return rp

    def act(self, ctx: PassContext, rp: StreamSetPlan) -> Result:
        desired = rp.desired
        if desired is None or ctx.spec_set is None:
            return unplanned(rp)
        # The engine saw its Deployment Ready (the reference is ready_first). Planned once
        # per pass: the plan made against the Deployment as it is now is acted on; one made
        # while the Deployment was still pending is made again, now that it is Ready.
        planned = rp.plan if rp.waiting is None else None
        return guarded(rp.resource, lambda: _apply(ctx, desired, planned))

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        return guarded(record.key, lambda: _teardown(ctx, record))

    def background(self, services: Services, runtime: Runtime) -> None:
        """The frame watch: every source's frames re-proven in the background, so that a
        steady-state pass trusts the recorded proof instead of decoding every source."""
        Streaming.of(services).frames_watched = True
        watch = FrameWatch(services.store, runtime.wake, runtime.mine)
        runtime.spawn("frames", lambda: watch.run(runtime.stop))


def _resolve(ctx: PassContext, ss: StreamSet, spec_set: SpecSet) -> StreamSetDesired:
    wanted = spec_set.deployment(ss.spec.deployment)
    assert wanted is not None  # crossref guarantees it
    dep = _serving(ctx, wanted)
    session = Hosts.of(ctx.services).session(spec_set.host(dep.spec.host))
    return StreamSetDesired(
        streamset=ss, deployment=dep, resource=Key("StreamSet", ss.metadata.name),
        spec_hash=spec_hash(ss),
        rtvi_url=session.url_for(dep.spec.port.address, dep.spec.port.host),
        publisher_host=ss.spec.publisher.host or dep.spec.host,
        vst_url=ss.spec.vst.url if ss.spec.vst is not None else None,
        sources=desired_sources(ss, ctx.services.instance),
        source_file=spec_set.source_file(ss))


def _serving(ctx: PassContext, dep: Deployment) -> Deployment:
    """The Deployment as it serves: its spec, or, while it holds out a candidate of that spec
    (qualifying, rejected, rolled back: its facts say so, ``Facts.holds``), the version it
    runs, as last applied: the streams go to the service that answers, at its port, with its
    token and model."""
    record = ctx.services.store.load(Key("Deployment", dep.metadata.name))
    if record is None or not record.applied_spec:
        return dep
    wanted = spec_hash(dep)
    if record.observed_generation == wanted:  # converged: the usual pass stops here
        return dep
    model = Facts.for_kind("Deployment")
    if model is None or not model.of(record).holds(wanted):
        return dep
    try:
        return dep.model_copy(update={"spec": DeploymentSpec.model_validate(
            record.applied_spec)})
    except ValidationError:
        return dep  # an older record: the spec as asked for, as before


def _controller(ctx: PassContext) -> StreamSetController:
    services, hosts, streaming = ctx.services, Hosts.of(ctx.services), Streaming.of(ctx.services)

    def session_for(host_name: str) -> HostSession:
        return hosts.session(hosts.host_for(ctx.spec_set, host_name, None))
    return StreamSetController(services.store, services.instance, session_for, streaming.hub,
                               services.progress, ctx.clients, count=services.count_call,
                               stop=ctx.stop, frames_watched=streaming.frames_watched)


def _pending_plan(desired: StreamSetDesired, record: ResourceStatus | None,
                  waiting: str) -> StreamPlan:
    recorded = recorded_sources(record)
    result = StreamPlan(desired.resource)
    for name in sorted(set(recorded) - set(desired.sources)):
        result.actions.append(source_action("remove", name, f"no longer in the spec ({waiting})"))
    for name, src in desired.sources.items():
        if (rec.hash if (rec := recorded.get(name)) else None) != src.hash:
            result.actions.append(source_action("register", name, f"new or changed source "
                                               f"({waiting})"))
    return result


def _apply(ctx: PassContext, desired: StreamSetDesired, planned: StreamPlan | None) -> Result:
    ctx.clients.authorize(desired.rtvi_url, api_token(desired.deployment.spec))
    ctl = _controller(ctx)
    ss = desired.streamset
    resource = desired.resource
    the_plan = planned if planned is not None else ctl.plan(desired)
    try:
        result = ctl.apply(desired, the_plan, ctx.timeout_s, ctx.revision)
    except (SourcesDegraded, AtCapacity) as exc:  # known not Ready; retried with backoff
        reason = "SourcesDegraded" if isinstance(exc, SourcesDegraded) else "AtCapacity"
        return retry(resource, f"{reason}: {exc}", reason,
                     report=Report(detail=str(exc), ready="False"))
    if the_plan.changes:  # as for a Deployment: no line per resource per no-op resync
        log.info("resource.ready", resource=resource, sources=len(result.sources),
                 actions=[str(a) for a in the_plan.actions], waited_s=round(result.waited_s, 2))
    message = f"Ready: {len(result.sources)} source(s) with fresh frames"
    if ss.spec.captions is not None:
        message += " and captions"
    if the_plan.changes:
        ctx.services.store.events.append(resource, "Normal", "Ready",
                                         f"ready after {result.waited_s:.1f}s")
    else:
        message += " (no changes)"
    said = Report(detail=f"{len(result.sources)} source(s) registered with fresh frames",
                  facts=result.facts, known=result.known)
    return done(resource, message, "FramesFlowing", changed=the_plan.changes, report=said)


def _teardown(ctx: PassContext, record: ResourceStatus) -> Result:
    """Tear down every source recorded for a StreamSet (contract order), then forget it."""
    store = ctx.services.store
    names = sorted({i.name for i in record.inventory} | set(recorded_sources(record)))
    known = StreamSetStatusFacts.of(record)
    rtvi = known.rtvi
    dep = store.load(Key("Deployment", known.deployment)) if known.deployment else None
    if dep is None or not dep.inventory:
        rtvi = None  # the service is gone: its streams went with it
    elif rtvi is not None:
        ctx.clients.authorize(rtvi, _recorded_token(dep))
    spec = record.applied_spec or {}
    raw = spec.get("teardown")
    try:  # as last applied; the spec model's defaults for a record that lacks them
        teardown = TeardownSpec.model_validate(raw if isinstance(raw, dict) else {})
    except ValidationError:
        teardown = TeardownSpec()
    left = _controller(ctx).teardown(record.key, names, rtvi,
                                     teardown.drainTimeoutSeconds, teardown.deadlineSeconds)
    for line in left:
        store.events.append(record.key, "Warning", "LeftBehind", line)
    if left:
        return retry(record.key, "left behind: " + "; ".join(left), "LeftBehind")
    store.delete(record.key)
    store.events.append(record.key, "Normal", "Deleted", f"removed {len(names)} source(s)")
    return done(record.key, f"deleted {len(names)} source(s): streams, sensors and "
                "publishers", changed=True)


def _recorded_token(dep: ResourceStatus) -> str | None:
    """The API token of a Deployment as last applied (its spec may be gone from the specs).
    A token that cannot be had now does not block the teardown: it is tried without one (a
    service that insists answers 401, and the teardown reports that, naming the service)."""
    try:
        return api_token(DeploymentSpec.model_validate(dep.applied_spec or {}))
    except ValidationError:
        return None  # an older record: it sends no token, as before
    except ControllerError as exc:
        log.warning("teardown.token_unavailable", resource=dep.resource, error=str(exc))
        return None
