"""Host: a Docker engine (local or over SSH). Observed, never changed: nothing of it is ours.

A pass observes the engine and records its facts; an unreachable Host is Degraded (its
resources wait, never deleted), a refused one (e.g. an unknown SSH host key) Stalled. In the
daemon its Docker events are followed while it answers (``background``: ``HostWatchers``).
"""

from __future__ import annotations

import time

from controllers.contract import (
    PassContext,
    PlanLike,
    ResourcePlan,
    Result,
    Runtime,
    declared_references,
    done,
    retry,
    terminal,
)
from controllers.errors import ControllerError, PermanentError
from controllers.host.facts import HostStatusFacts
from controllers.host.fleet import Hosts
from controllers.host.watch import HostWatchers
from controllers.services import Services
from specs.facts import HostFacts
from specs.kinds import HOST
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
        if error is not None or session is None or session.facts is None:
            message = error or "not observed"
            refused = name in hosts.refused
            _record(ctx, host, None, message, refused)
            reason = "Refused" if refused else "HostUnreachable"
            return (terminal if refused else retry)(rp.resource, f"{reason}: {message}", reason)
        _record(ctx, host, session.facts, "", False)
        hosts.watch(host)
        return done(rp.resource, f"Docker {session.facts.engine_version} answers")

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


def _record(ctx: PassContext, host: Host, facts: HostFacts | None, error: str,
            permanent: bool) -> None:
    store = ctx.services.store
    resource = Key("Host", host.metadata.name)
    before = store.load(resource)
    was_ready = before is not None and (c := before.condition("Ready")) is not None and (
        c.status == "True")
    digest = spec_hash(host)

    def mutate(st: ResourceStatus) -> None:
        st.applied_revision = ctx.revision or st.applied_revision
        st.applied_spec = host.spec.model_dump(mode="json")
        st.desired_generation = digest
        if facts is not None:  # observed at this spec: in sync
            st.observed_generation = digest
        known = HostStatusFacts.of(st)
        known.docker = host.spec.docker
        if facts is not None:
            known.reachable, known.engine_version = True, facts.engine_version
            known.api_version, known.os = facts.api_version, facts.os
            known.gpus, known.gpu_probe = facts.gpus or "none", facts.gpu_probe
            st.set_condition("Ready", "True", "Reachable",
                             f"Docker {facts.engine_version} answers")
            st.set_condition("Degraded", "False", "Reachable", "")
            st.set_condition("Stalled", "False", "Reachable", "")
        else:
            known.reachable = False
            reason = "Refused" if permanent else "Unreachable"
            st.set_condition("Ready", "False", reason, error)
            st.set_condition("Stalled" if permanent else "Degraded", "True", reason, error)
        known.put(st)
    store.update(resource, mutate)
    if facts is None and (was_ready or before is None):
        store.events.append(resource, "Warning", "Unreachable", error)
    elif facts is not None and not was_ready and before is not None:
        store.events.append(resource, "Normal", "Reachable", "Host answers again")
