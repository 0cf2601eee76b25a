"""Host: a Docker engine (local or over SSH). Observed, never changed: nothing of it is ours.

A pass observes the engine and records its facts; an unreachable Host is Degraded (its
resources wait, never deleted), a refused one (e.g. an unknown SSH host key) Stalled. In the
daemon its Docker events are followed while it answers (``background``: ``HostWatchers``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from controllers.contract import (
    PassContext,
    PlanLike,
    Report,
    ResourcePlan,
    Result,
    Runtime,
    declared_references,
    done,
    retry,
    terminal,
)
from controllers.errors import ControllerError, PermanentError
from controllers.kinds.host.facts import HostStatusFacts
from controllers.kinds.host.fleet import Hosts
from controllers.kinds.host.watch import HostWatchers
from controllers.services import Services
from specs.declarations import HOST
from specs.facts import HostFacts
from specs.models import Host
from specs.validate import spec_hash
from state.keys import Key
from state.models import ResourceStatus

FACTS_MAX_AGE_S = 300.0


HostPlan = ResourcePlan[Host, PlanLike]  # observed, never changed: no plan of its own


class HostKind:
    name = "Host"
    spec = HOST
    owns = False
    max_parallel: int | None = 2  # each observes an engine: two at a time are plenty

    def references(self, resource: Host) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        return []

    def plan(self, ctx: PassContext, resource: Host) -> HostPlan:
        """Observe the Host (kept in memory for its dependents' plans; recorded by act)."""
        observe(Hosts.of(ctx.services), resource)
        return HostPlan(Key("Host", resource.metadata.name), resource.metadata.name,
                        desired=resource)

    def act(self, ctx: PassContext, rp: HostPlan) -> Result:
        host = rp.desired
        assert host is not None  # plan always sets it
        hosts, name = Hosts.of(ctx.services), host.metadata.name
        error = hosts.errors.get(name)
        session = hosts.sessions.get(name)
        before = ctx.services.store.load(rp.resource)
        was_ready = before is not None and (c := before.condition("Ready")) is not None and (
            c.status == "True")
        if error is not None or session is None or session.facts is None:
            message = error or "not observed"
            refused = name in hosts.refused
            reason = "Refused" if refused else "HostUnreachable"
            said = Report(detail=message, facts=_facts(ctx, host, None), ready="False",
                          stalled=refused)
            return (terminal if refused else retry)(rp.resource, f"{reason}: {message}",
                                                    reason, report=said)
        if not was_ready and before is not None:
            ctx.services.store.events.append(rp.resource, "Normal", "Reachable",
                                             "Host answers again")
        hosts.watch(host)
        answers = f"Docker {session.facts.engine_version} answers"
        return done(rp.resource, answers, "Reachable",
                    report=Report(detail=answers, facts=_facts(ctx, host, session.facts)))

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        ctx.services.store.delete(record.key)
        Hosts.of(ctx.services).unwatch(record.name)
        return done(record.key, "forgot the Host (nothing of it is ours to delete)")

    def background(self, services: Services, runtime: Runtime) -> None:
        """Follow each observed Host's Docker events (``HostWatchers``)."""
        hosts = Hosts.of(services)
        hosts.watchers = HostWatchers(hosts, services.instance, runtime)


def observe(hosts: Hosts, host: Host) -> bool:
    """Observe one Host into its session (facts) or ``hosts.errors``; False if unreachable.

    Facts (engine version, GPUs) are read afresh every FACTS_MAX_AGE_S; in between, the view
    its resources share (two list calls) is proof enough that the engine answers."""
    name = host.metadata.name
    session = hosts.session(host)
    try:
        if session.facts is not None and (
                time.monotonic() - session.observed_at < FACTS_MAX_AGE_S):
            session.view()
        else:
            session.observe()
    except ControllerError as exc:
        hosts.errors[name] = str(exc)
        if isinstance(exc, PermanentError):
            hosts.refused.add(name)
        return False
    hosts.errors.pop(name, None)
    hosts.refused.discard(name)
    return True


def _facts(ctx: PassContext, host: Host,
           facts: HostFacts | None) -> Callable[[ResourceStatus], None]:
    """What a pass over ``host`` says of it (``facts``: what answered; None: nothing did)."""
    digest = spec_hash(host)

    def mutate(st: ResourceStatus) -> None:
        st.applied_revision = ctx.revision or st.applied_revision
        st.applied_spec = host.spec.model_dump(mode="json")
        if facts is not None:  # observed at this spec: in sync
            st.observed_generation = digest
        known = HostStatusFacts.of(st)
        known.docker = host.spec.docker
        known.reachable = facts is not None
        if facts is not None:
            known.engine_version, known.api_version = facts.engine_version, facts.api_version
            known.os, known.gpus, known.gpu_probe = facts.os, facts.gpus or "none", facts.gpu_probe
        known.put(st)
    return mutate
