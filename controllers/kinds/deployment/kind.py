"""Deployment: one RT-VLM service container on a Host
(``controllers.kinds.deployment.controller`` acts).

Depends on its Host: planned only when the Host answers (else Degraded, HostUnavailable,
never deleted). A container name held by a foreign container is a Conflict, left untouched
and re-tried when a container on that Host goes. Deleting one frees its GPUs, so the other
Deployments of its Host are woken (one may have been refused for them).
"""

from __future__ import annotations

import structlog

from controllers.clients.docker_client import DockerEngine
from controllers.contract import (
    Outcome,
    PassContext,
    Report,
    ResourcePlan,
    Result,
    Runtime,
    declared_references,
    done,
    guarded,
    retry,
    terminal,
    unplanned,
)
from controllers.errors import PullFailed, ReadinessFailed, StillProgressing
from controllers.kinds.deployment import promoting
from controllers.kinds.deployment.controller import DeploymentController, resolve_desired
from controllers.kinds.deployment.facts import DeploymentStatusFacts
from controllers.kinds.deployment.imageprune import prune_images, record_image, stale_images
from controllers.kinds.deployment.plan import Desired, Plan
from controllers.kinds.deployment.removal import remove_owned
from controllers.kinds.host.fleet import Hosts
from controllers.kinds.host.pulls import Pulls, bring
from controllers.services import Services
from specs.declarations import DEPLOYMENT
from specs.images import parse_image, source_of
from specs.models import Deployment
from state.keys import Key
from state.models import ResourceStatus

log = structlog.get_logger("reconciler.kinds")


DeploymentPlan = ResourcePlan[Desired, Plan]


class DeploymentKind:
    name = "Deployment"
    spec = DEPLOYMENT
    owns = True
    max_parallel: int | None = None

    def references(self, resource: Deployment) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        return [Key("Host", _host_of(record))]

    def plan(self, ctx: PassContext, resource: Deployment) -> DeploymentPlan:
        assert ctx.spec_set is not None  # a pass that plans has its spec set
        services, hosts = ctx.services, Hosts.of(ctx.services)
        rp = DeploymentPlan(Key("Deployment", resource.metadata.name), resource.metadata.name)
        hosts.pass_started(rp.resource)  # a name freed from now on is not missed (conflict)
        host_name = resource.spec.host
        if host_name in hosts.errors:
            return rp.refuse(hosts.errors[host_name], "HostUnavailable", permanent=False)
        session = hosts.session(ctx.spec_set.host(host_name))
        with rp.observing():
            rp.desired = resolve_desired(resource, ctx.spec_set, session, services.instance,
                                         services.store, Pulls.of(services))
            rp.plan = _controller(ctx, host_name).plan(rp.desired)
        return rp

    def act(self, ctx: PassContext, rp: DeploymentPlan) -> Result:
        desired, plan = rp.desired, rp.plan
        if desired is None or plan is None:
            return unplanned(rp)
        host = desired.deployment.spec.host
        Hosts.of(ctx.services).conflict(rp.resource, host, plan.conflict is not None)
        if plan.conflict is not None:
            return terminal(rp.resource, f"Conflict: {plan.conflict}", "Conflict",
                            report=Report(detail=plan.conflict))
        return guarded(rp.resource, lambda: _apply(ctx, desired, plan))

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        services = ctx.services
        host_name = _host_of(record)

        def remove() -> Result:
            hosts = Hosts.of(services)
            session = hosts.session(hosts.host_for(ctx.spec_set, host_name, record))
            removed, left = remove_owned(session.engine(), services.store, services.instance,
                                         record.key, record)
            for line in removed:
                services.store.events.append(record.key, "Normal", "Deleted",
                                             f"removed {line}")
            for line in left:
                services.store.events.append(record.key, "Warning", "LeftAlone", line)
            if not left and hosts.host_for(ctx.spec_set, host_name, record).spec.images.prune:
                _prune(ctx, session.engine(), record.key, frozenset())
            if not left:
                services.store.delete(record.key)
            detail = "; ".join(removed + left) or "nothing owned"
            # What it held (GPUs, rule 10) is free now: a Deployment refused for it may go.
            neighbours = tuple(Key("Deployment", d.metadata.name) for d in
                               (ctx.spec_set.deployments if ctx.spec_set else [])
                               if d.spec.host == host_name)
            if left:
                return terminal(record.key, f"deleted: {detail}", "LeftAlone",
                                changed=bool(removed), wake=neighbours)
            return done(record.key, f"deleted: {detail}", changed=bool(removed),
                        wake=neighbours)
        result = guarded(record.key, remove)
        if not result.ok and result.outcome not in (Outcome.TERMINAL, Outcome.STOPPED):
            return retry(record.key, f"cannot prune yet: {result.message}", "PruneFailed")
        return result

    def background(self, services: Services, runtime: Runtime) -> None:
        return None  # its containers' events are the Host kind's watch


def _controller(ctx: PassContext, host_name: str) -> DeploymentController:
    services = ctx.services
    session = Hosts.of(services).sessions[host_name]
    return DeploymentController(session, services.store, services.instance, services.progress,
                                ctx.stop)


def _apply(ctx: PassContext, desired: Desired, plan: Plan) -> Result:
    resource = desired.resource
    controller = _controller(ctx, desired.deployment.spec.host)
    if desired.pull is not None:
        desired, plan = _pulled(ctx, controller, desired)
    if (decided := promoting.decided(ctx, controller, desired, plan)) is not None:
        return decided  # a candidate qualifying, held out or rolled back
    if plan.promoting:
        promoting.promote(ctx, desired, plan)
    try:
        result = controller.apply(desired, plan, ctx.timeout_s, ctx.revision,
                                  phased=not ctx.wait_ready)
    except ReadinessFailed as exc:  # during a bake: a breach, and the rollback is now
        if (breach := promoting.breach(desired, plan, exc)) is None:
            raise
        return promoting.roll_back(ctx, controller, desired, plan, breach)
    result.facts = promoting.ready(desired, result)
    if plan.changes or result.waited_s:
        # Only what changed or was waited for: a line per resource per periodic resync would
        # grow the log without end and tell nothing (`status` says a resource is Ready).
        log.info("resource.ready", resource=resource, model=result.model_id, url=desired.url,
                 actions=[str(a) for a in plan.actions], waited_s=round(result.waited_s, 2),
                 revision=ctx.revision)
    host = controller.session.host.spec
    if host.images.prune:
        keep = frozenset(source_of(host, parse_image(image)).text
                         for image in promoting.images_kept(ctx, desired, plan))
        if plan.changes or stale_images(plan.record, keep):
            _prune(ctx, controller.engine, resource, keep)
    message = f"Ready: serving {result.model_id} at {desired.url}"
    if not plan.changes:
        message += " (no changes)"
    else:
        ctx.services.store.events.append(resource, "Normal", "Ready",
                                         f"ready after {result.waited_s:.1f}s")
    # Nothing learnt (a service proven ready at this spec, still serving): the record as the
    # plan read it says all of it, and nothing is read or written again.
    said = Report(detail=f"serving model {result.model_id} at {desired.url}",
                  facts=result.facts, known=plan.record if result.facts is None else None)
    return promoting.watched(ctx, controller, desired, plan, said) or done(
        resource, message, "Ready", changed=plan.changes, report=said)


def _pulled(ctx: PassContext, controller: DeploymentController, desired: Desired
            ) -> tuple[Desired, Plan]:
    """Bring the image to the Host before anything else (the daemon: a phase beside the
    queue, StillProgressing until the board wakes us), then plan again with it there: only
    now is its ID known, and only now may what runs be replaced."""
    assert desired.pull is not None
    assert ctx.spec_set is not None
    resource, services = desired.resource, ctx.services
    session = controller.session
    record_image(services.store, resource, session.name, desired.pull.image.text)
    try:
        bring(Pulls.of(services), session, desired.pull, resource, wake=ctx.hooks.wake,
              wait=ctx.wait_ready, timeout_s=ctx.timeout_s, stop=ctx.stop,
              progress=lambda line: services.progress(resource, line))
    except StillProgressing as exc:
        controller.progressing(resource, "Pulling", str(exc))
        raise
    session.invalidate()
    again = resolve_desired(desired.deployment, ctx.spec_set, session, services.instance,
                            services.store, Pulls.of(services))
    if again.pull is not None:
        raise PullFailed(f"{again.pull.target} was pulled but Host {session.name} still "
                         f"needs it ({again.pull.cause})")
    return again, controller.plan(again)


def _prune(ctx: PassContext, engine: DockerEngine, resource: Key, keep: frozenset[str]
           ) -> None:
    """Remove the images this Deployment brought and no longer runs (the Host's
    ``images.prune``); each one removed is an event."""
    store = ctx.services.store
    record = store.load(resource)
    if record is None:
        return
    for line in prune_images(engine, store, record, keep):
        store.events.append(resource, "Normal", "Pruned", f"removed {line}: nothing uses it")


def _host_of(record: ResourceStatus) -> str:
    host = DeploymentStatusFacts.of(record).host
    if host:
        return host
    for item in record.inventory:
        return item.host
    return "local"
