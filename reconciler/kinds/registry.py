"""The registry of kinds, and the order and dependencies that follow from it.

Order is never written in code: it is derived from the kinds each kind's references name
(``SpecKind.depends_on``; a topological order, checked for cycles and unknown kinds when a
kind is registered). Dependencies between
resources come from each kind's ``references`` (specs) and ``recorded_references`` (records,
for pruning): converge what is depended on first, delete dependents first, and wake the
dependents of a resource that changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from controllers.contract import AnyKind, key_of
from specs import kinds as spec_kinds
from state.errors import StateError
from state.keys import Key

if TYPE_CHECKING:
    from specs.validate import SpecSet
    from state.store import Store


class RegistryError(Exception):
    """A kind that cannot be registered (duplicate, unknown dependency, cycle)."""


class Registry:
    def __init__(self) -> None:
        self._kinds: dict[str, AnyKind] = {}
        self._levels: dict[str, int] = {}

    def register(self, kind: AnyKind) -> None:
        """Add ``kind``, and its spec declaration to the table the loader validates with."""
        if kind.name in self._kinds:
            raise RegistryError(f"kind {kind.name} is already registered")
        unknown = [d for d in kind.spec.depends_on if d not in self._kinds]
        if unknown:  # registering in dependency order also rules out cycles
            raise RegistryError(f"kind {kind.name} depends on unregistered kind(s) "
                                f"{', '.join(unknown)}")
        self._kinds[kind.name] = kind
        self._levels[kind.name] = 1 + max((self._levels[d] for d in kind.spec.depends_on),
                                          default=-1)
        spec_kinds.register(kind.spec)

    def register_all(self, kinds: Iterable[AnyKind]) -> None:
        """Register ``kinds`` in their dependency order, whatever the order given (the table
        of kinds lists them as people added them)."""
        pending = list(kinds)
        while pending:
            ready = [k for k in pending if all(d in self._kinds or d == k.name
                                               for d in k.spec.depends_on)]
            if not ready:  # a cycle, or a dependency no kind declares: register says which
                ready = pending[:1]
            for kind in ready:
                self.register(kind)
                pending.remove(kind)

    def unregister(self, name: str) -> None:
        """Remove a kind nobody depends on (tests register toy kinds and take them away)."""
        users = [k.name for k in self._kinds.values() if name in k.spec.depends_on]
        if users:
            raise RegistryError(f"kind {name} is needed by {', '.join(users)}")
        self._kinds.pop(name, None)
        self._levels.pop(name, None)
        spec_kinds.unregister(name)

    def get(self, name: str) -> AnyKind | None:
        return self._kinds.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[AnyKind]:
        """Kinds in dependency order (what is depended on first)."""
        return iter(sorted(self._kinds.values(), key=lambda k: (self._levels[k.name], k.name)))

    @property
    def names(self) -> list[str]:
        return [k.name for k in self]

    def level(self, kind: str) -> int:
        """0 for kinds that depend on nothing, then one more than the deepest dependency."""
        return self._levels.get(kind, 0)

    def converge_order(self, keys: Iterable[Key]) -> list[Key]:
        return sorted(keys, key=lambda k: (self.level(k.kind), k))

    def delete_order(self, keys: Iterable[Key]) -> list[Key]:
        return sorted(keys, key=lambda k: (-self.level(k.kind), k))

    def dependents(self, spec_set: SpecSet) -> dict[Key, list[Key]]:
        """key → keys of the resources in ``spec_set`` that reference it."""
        out: dict[Key, list[Key]] = {}
        for resource in spec_set.resources:
            kind = self._kinds.get(resource.kind)
            if kind is None:
                continue
            for ref in kind.references(resource):
                out.setdefault(ref, []).append(key_of(resource))
        return out

    def closure(self, keys: Iterable[Key], spec_set: SpecSet) -> set[Key]:
        """``keys`` and everything that depends on them, transitively."""
        dependents = self.dependents(spec_set)
        found, todo = set(keys), list(keys)
        while todo:
            for dep in dependents.get(todo.pop(), []):
                if dep not in found:
                    found.add(dep)
                    todo.append(dep)
        return found

    def recorded_dependents(self, store: Store, key: Key) -> list[Key]:
        """Recorded resources that depend on ``key`` (they must be deleted first)."""
        users = [k for k in self._kinds.values() if key.kind in k.spec.depends_on]
        return sorted(record.key for k in users for record in store.list(k.name)
                      if key in k.recorded_references(record))

    def root_of(self, key: Key, spec_set: SpecSet | None, store: Store) -> Key | None:
        """The resource of a kind that depends on no kind (a Host) that ``key`` leads to by
        its first reference, and that one's first, and so on: what it runs on. From its spec
        when ``spec_set`` has it, else from its record (a resource being pruned); None where
        the chain breaks (no spec and no readable record). Replicas share the fleet by it
        (``reconciler.sharing``): a resource is acted on by whoever holds its root."""
        seen: set[Key] = set()
        while key not in seen:
            seen.add(key)
            kind = self._kinds.get(key.kind)
            if kind is None:
                return None
            if self.level(key.kind) == 0:
                return key
            wanted = spec_set.get(key.kind, key.name) if spec_set is not None else None
            if wanted is not None:
                refs = kind.references(wanted)
            else:
                try:
                    record = store.load(key)
                except StateError:  # a broken record: its own pass reports it
                    return None
                refs = kind.recorded_references(record) if record is not None else []
            if not refs:
                return None
            key = refs[0]
        return None

    def owning(self) -> list[str]:
        """Kinds whose records stand for things we created."""
        return [k.name for k in self if k.owns]
