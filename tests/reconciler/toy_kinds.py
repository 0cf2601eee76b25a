"""Two toy kinds that exist only in tests: a Switch and a Lamp that depends on it.

They prove the kind contract: registered here, they are planned, applied, deleted, ordered and
woken by the daemon, the engine and the CLI without a line of those knowing them. Their
"world" is a folder: a Switch is a file ``switch-NAME`` (it turns on only once the file
``power`` exists), a Lamp a file ``lamp-NAME`` holding its colour.

Each brings its own background work to the daemon, as the Host and StreamSet kinds do: the
Switch kind a *watch* (a switch file that disappears, someone flipped it off by hand, wakes its
Switch, which is repaired at once instead of at the next resync), the Lamp kind a *worker* (a
meter that writes how many lamps are lit to ``meter``, and ``stopped`` when the daemon ends),
whose readings live in the Lamp kind's own part of the services (``Meter``; ``meter-closed``
once the services close it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, Self

from controllers.actions import Action
from controllers.contract import Runtime, declared_references
from controllers.services import Part, Services
from controllers.waiting import until
from reconciler.kinds import (
    REGISTRY,
    PassContext,
    Report,
    ResourcePlan,
    Result,
    done,
    retry,
)
from specs.kinds import Reference, SpecKind
from specs.models import Metadata, SpecResource, Strict
from specs.validate import spec_hash
from state.keys import Key
from state.models import ResourceStatus


class SwitchSpec(Strict):
    label: str = "main"


class Switch(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Switch"]
    metadata: Metadata
    spec: SwitchSpec


class LampSpec(Strict):
    switch: str
    colour: str


class Lamp(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Lamp"]
    metadata: Metadata
    spec: LampSpec


class _Plan:
    def __init__(self, verb: str | None, target: str, cause: str) -> None:
        self.actions = [Action(verb, target, cause)] if verb else []
        self.conflict: str | None = None

    @property
    def changes(self) -> bool:
        return bool(self.actions)


def _ready(ctx: PassContext, resource: SpecResource,
           **facts: str) -> Callable[[ResourceStatus], None]:
    """What a toy pass reports of its resource, for the engine to write with its verdict: the
    revision it worked from, the generation it converged to (what a ready_first reference
    checks) and its facts."""
    def mutate(st: ResourceStatus) -> None:
        st.applied_revision = ctx.revision
        st.observed_generation = spec_hash(resource)
        st.facts.update(facts)
    return mutate


WATCH_PACE_S = 0.05
SwitchPlan = ResourcePlan[Switch, _Plan]
LampPlan = ResourcePlan[Lamp, _Plan]


class SwitchKind:
    name = "Switch"
    spec = SpecKind("Switch", Switch)
    owns = True
    max_parallel: int | None = None

    def __init__(self, world: Path) -> None:
        self.world = world

    def references(self, resource: Switch) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        return []

    def plan(self, ctx: PassContext, resource: Switch) -> SwitchPlan:
        name = resource.metadata.name
        on = (self.world / f"switch-{name}").exists()
        return SwitchPlan(Key("Switch", name), name, desired=resource,
                          plan=_Plan(None if on else "create", f"switch {name}", "new Switch"))

    def act(self, ctx: PassContext, rp: SwitchPlan) -> Result:
        if not (self.world / "power").exists():
            return retry(rp.resource, "no power yet", "NoPower")  # backoff retry
        changed = rp.changes
        (self.world / f"switch-{rp.name}").write_text("on")
        assert rp.desired is not None  # plan always sets it
        return done(rp.resource, "on", "On", changed=changed,
                    report=Report("switched on", _ready(ctx, rp.desired)))

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        (self.world / f"switch-{record.name}").unlink(missing_ok=True)
        ctx.services.store.delete(record.key)
        return done(record.key, "switched off", changed=True)

    def background(self, services: Services, runtime: Runtime) -> None:
        """The watch: a switch file that was there and is gone wakes its Switch."""
        def watch() -> None:
            seen: set[str] = set()
            while not runtime.stop.wait(WATCH_PACE_S):
                now = {p.name.removeprefix("switch-") for p in self.world.glob("switch-*")}
                for name in seen - now:
                    runtime.wake(Key("Switch", name))
                seen = now
        runtime.spawn("switch-watch", watch)


class LampKind:
    name = "Lamp"
    # Declared once: the loader checks that the Switch exists, the daemon orders by it, the
    # engine lights no Lamp before its Switch is on (ready_first).
    spec = SpecKind("Lamp", Lamp, references=(
        Reference(("spec", "switch"), "Switch", lambda lamp: lamp.spec.switch,
                  ready_first=True),))
    owns = True
    max_parallel: int | None = None

    def __init__(self, world: Path) -> None:
        self.world = world

    def references(self, resource: Lamp) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        return [Key("Switch", record.facts["switch"])] if record.facts.get("switch") else []

    def plan(self, ctx: PassContext, resource: Lamp) -> LampPlan:
        name = resource.metadata.name
        lamp = self.world / f"lamp-{name}"
        have = lamp.read_text() if lamp.exists() else None
        switch = Key("Switch", resource.spec.switch)
        waiting = f"after {switch} is on" if switch in ctx.pending else None
        verb = None if have == resource.spec.colour else "create"
        return LampPlan(Key("Lamp", name), name, desired=resource, waiting=waiting,
                        plan=_Plan(verb, f"lamp {name}", f"colour {resource.spec.colour}"))

    def act(self, ctx: PassContext, rp: LampPlan) -> Result:
        lamp = rp.desired
        assert lamp is not None  # plan always sets it
        if lamp.spec.colour == "boom":
            raise RuntimeError("the bulb exploded")  # a bug no kind expected
        hold = self.world / f"hold-{rp.name}"  # the test holds this pass mid-way
        until(lambda: None if hold.exists() else True, timeout_s=30, pace=0.02, stop=ctx.stop)
        if not rp.changes:
            return done(rp.resource, f"lit {lamp.spec.colour} (no changes)")
        (self.world / f"lamp-{rp.name}").write_text(lamp.spec.colour)
        return done(rp.resource, f"lit {lamp.spec.colour}", "On", changed=rp.changes,
                    report=Report(f"lit {lamp.spec.colour}",
                                  _ready(ctx, lamp, switch=lamp.spec.switch)))

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        if not (self.world / f"switch-{record.facts.get('switch')}").exists():
            raise AssertionError("a Lamp must be deleted before its Switch")
        (self.world / f"lamp-{record.name}").unlink(missing_ok=True)
        ctx.services.store.delete(record.key)
        return done(record.key, "unplugged", changed=True)

    def background(self, services: Services, runtime: Runtime) -> None:
        """The worker: a meter of lit lamps, read into the kind's own part of the services."""
        meter = Meter.of(services)
        meter.world = self.world

        def read() -> None:
            while not runtime.stop.wait(WATCH_PACE_S):
                meter.read(len(services.store.list("Lamp")))
            (self.world / "meter").write_text("stopped")
        runtime.spawn("lamp-meter", read)


class Meter(Part):
    """The Lamp kind's part: its meter's last reading; closing it leaves a mark."""

    def __init__(self) -> None:
        self.world: Path | None = None
        self.readings = 0
        self._lock = threading.Lock()

    @classmethod
    def made(cls, services: Services) -> Self:
        return cls()

    def read(self, lit: int) -> None:
        with self._lock:
            self.readings += 1
            if self.world is not None:
                (self.world / "meter").write_text(str(lit))

    def close(self) -> None:
        if self.world is not None:
            (self.world / "meter-closed").touch()


@contextmanager
def toy_kinds(world: Path) -> Iterator[None]:
    world.mkdir(parents=True, exist_ok=True)
    REGISTRY.register(SwitchKind(world))
    REGISTRY.register(LampKind(world))
    try:
        yield
    finally:
        REGISTRY.unregister("Lamp")
        REGISTRY.unregister("Switch")


def toy_specs(switch: str = "hall", lamp: str = "desk", colour: str = "amber") -> str:
    return (f"apiVersion: rtvi.reconciler/v1\nkind: Switch\nmetadata: {{name: {switch}}}\n"
            f"spec: {{label: main}}\n---\n"
            f"apiVersion: rtvi.reconciler/v1\nkind: Lamp\nmetadata: {{name: {lamp}}}\n"
            f"spec: {{switch: {switch}, colour: {colour}}}\n")
