"""Passes over a spec set, for every kind alike: plan, apply, delete, reconcile one key.

Shared by ``plan`` (observe + plan, never acts), ``apply`` (plan, then act in dependency
waves) and the daemon (one work-queue key at a time), so they cannot drift apart. The engine
knows no kind by name: it iterates ``reconciler.kinds.REGISTRY`` and orders by the kinds'
declared dependencies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby

import structlog

from controllers.passstatus import write_status
from reconciler.kinds import (
    REGISTRY,
    AnyPlan,
    Hooks,
    NoHooks,
    Outcome,
    PassContext,
    Registry,
    Report,
    ResourcePlan,
    Result,
    Services,
    SpecResource,
    done,
    guarded,
    key_of,
    terminal,
    wait,
)
from specs.validate import SpecSet, spec_hash
from state.errors import StateError
from state.keys import Key
from state.models import Owner
from state.store import Store

MAX_PARALLEL_APPLIES = 16  # readiness waits are I/O-bound; a fleet converges together
# A pass that waits on another resource's work (a Deployment on its qualification run) asks
# for it, and that work's end asks for the waiting one again: ``apply`` follows such wake-ups
# this many rounds, as the daemon's queue does without end.
MAX_APPLY_ROUNDS = 4
log = structlog.get_logger("reconciler.engine")
Progress = Callable[[str, str], None]


class Engine:
    def __init__(self, store: Store, instance: Owner, progress: Progress,
                 registry: Registry = REGISTRY, stop: threading.Event | None = None) -> None:
        # Set to end every wait of every pass (the daemon's shutdown).
        self.stop = stop if stop is not None else threading.Event()
        self.services = Services(store, instance, progress, self.stop)
        self.registry = registry

    @property
    def store(self) -> Store:
        return self.services.store

    def close(self) -> None:
        self.services.close()

    def context(self, revision: str | None, spec_set: SpecSet | None, *,
                hooks: Hooks | None = None, timeout_s: float | None = None,
                pending: frozenset[Key] = frozenset(), wait_ready: bool = True,
                stop: threading.Event | None = None) -> PassContext:
        return PassContext(revision=revision, spec_set=spec_set, stop=stop or self.stop,
                           services=self.services, hooks=hooks or NoHooks(),
                           timeout_s=timeout_s, pending=pending, wait_ready=wait_ready)

    # --- one-shot commands -------------------------------------------------------------------

    def plan(self, spec_set: SpecSet, revision: str | None = None) -> list[AnyPlan]:
        """Plan every resource in dependency order; read-only. A resource whose dependency
        will change in this run is told so (``PassContext.pending``) and plans from its
        record rather than asking a service that is about to be replaced."""
        plans: list[AnyPlan] = []
        unsettled: set[Key] = set()
        for resource in sorted(spec_set.resources, key=lambda r: self.registry.level(r.kind)):
            kind = self.registry.get(resource.kind)
            if kind is None:
                continue
            ctx = self.context(revision, spec_set, pending=frozenset(unsettled))
            try:
                rp = self._plan_one(ctx, resource)
            finally:
                ctx.clients.close()
            if rp.error is not None or rp.changes:
                unsettled.add(rp.resource)
            plans.append(rp)
        return plans

    def apply(self, plans: list[AnyPlan], timeout_s: float | None, spec_set: SpecSet,
              revision: str | None = None) -> list[Result]:
        """Act on every plan, one dependency level at a time, each level in parallel."""
        ctx = self.context(revision, spec_set, timeout_s=timeout_s)
        try:
            with ThreadPoolExecutor(max_workers=MAX_PARALLEL_APPLIES) as pool:
                latest = {r.resource: r for r in self._waves(ctx, pool, plans)}
                for _ in range(MAX_APPLY_ROUNDS):
                    again = _woken(latest, spec_set)
                    if not again:
                        break
                    replanned = [self._plan_one(ctx, resource) for resource in again]
                    latest.update({r.resource: r for r in self._waves(ctx, pool, replanned)})
        finally:
            ctx.clients.close()
        return list(latest.values())

    def _waves(self, ctx: PassContext, pool: ThreadPoolExecutor, plans: list[AnyPlan]
               ) -> list[Result]:
        """Act on ``plans`` one dependency level at a time, each level in parallel."""
        results: list[Result] = []
        ordered = sorted(plans, key=lambda rp: self.registry.level(rp.resource.kind))
        for _, wave in groupby(ordered, key=lambda rp: self.registry.level(rp.resource.kind)):
            results += pool.map(lambda rp: self._act(ctx, rp), list(wave))
        return results

    def delete(self, spec_set: SpecSet | None, keys: list[Key]) -> list[Result]:
        """Delete what we own for ``keys``, dependents first."""
        ctx = self.context(None, spec_set)
        try:
            return [self.delete_one(ctx, key) for key in self.registry.delete_order(keys)]
        finally:
            ctx.clients.close()

    # --- single steps (the daemon's unit of work) --------------------------------------------

    def reconcile(self, ctx: PassContext, key: Key) -> Result:
        """One pass over one key: converge it if the spec set has it, else prune it."""
        spec_set = ctx.spec_set
        resource = spec_set.get(key.kind, key.name) if spec_set is not None else None
        if resource is not None:
            return self._act(ctx, self._plan_one(ctx, resource))
        if spec_set is None:  # nothing loaded yet: never prune on no information
            return done(key, "no revision loaded yet")
        users = self.registry.recorded_dependents(self.store, key)
        if users:  # dependents first: their deletion wakes this key
            return wait(key, f"waiting for {', '.join(users)} to be deleted first",
                        "WaitingForDependents")
        return self.delete_one(ctx, key)

    def delete_one(self, ctx: PassContext, key: Key) -> Result:
        record = self.store.load(key)
        if record is None:
            return done(key, "nothing recorded; nothing to delete")
        kind = self.registry.get(record.kind)
        if kind is None:
            return terminal(key, f"unknown kind {record.kind}; left alone", "UnknownKind")
        result = guarded(key, lambda: kind.delete(ctx, record))
        if result.ok:  # what it depended on may be waiting for it to go
            return done(result.resource, result.message, result.reason, changed=result.changed,
                        wake=result.wake + tuple(kind.recorded_references(record)))
        return result

    def _plan_one(self, ctx: PassContext, resource: SpecResource) -> AnyPlan:
        key = key_of(resource)
        kind = self.registry.get(resource.kind)
        assert kind is not None
        try:
            return kind.plan(ctx, resource)
        except StateError:
            raise  # the state directory, not the kind: the caller names the file
        except Exception as exc:  # a bug in a kind: one failed plan, never a traceback
            return ResourcePlan(key, resource.metadata.name).failed(exc)

    def _act(self, ctx: PassContext, rp: AnyPlan) -> Result:
        kind = self.registry.get(rp.resource.kind)
        assert kind is not None
        resource = (ctx.spec_set.get(rp.resource.kind, rp.resource.name)
                    if ctx.spec_set is not None else None)
        # The gate on what it references (asked again: a dependency may be Ready by now). A
        # plan that failed says why itself: that is more use than "waiting".
        if (resource is not None and rp.error is None
                and (gate := ctx.waiting_for(kind.spec, resource)) is not None):
            dependency, why = gate
            result = wait(rp.resource, why, f"WaitingFor{dependency.kind}",
                          report=Report(detail=why))
        else:
            result = guarded(rp.resource, lambda: kind.act(ctx, rp))
        # The record, written once for the pass: what the kind reported, and what its outcome
        # means for the conditions.
        return write_status(self.store, result,
                            spec_hash(resource) if resource is not None else None)


def _woken(latest: dict[Key, Result], spec_set: SpecSet) -> list[SpecResource]:
    """What ``apply`` acts on again: a resource a re-check (a pass waiting on other work)
    woke, and one waiting on a re-check that something woke. A woken resource that is done
    and waits on nothing is not looked at again (an Experiment's verdict wakes its template)."""
    waiting = {key for key, r in latest.items() if r.outcome is Outcome.RECHECK}
    keys = {key for r in latest.values() for key in r.wake
            if r.outcome is Outcome.RECHECK or key in waiting}
    found = [spec_set.get(key.kind, key.name) for key in sorted(keys)]
    return [resource for resource in found if resource is not None]
