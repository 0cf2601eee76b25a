"""Every kind's spec side, declared once: its model, its observation-free rules, and the
resources it references.

``specs.validate`` parses a document with its kind's model and checks its rules,
``specs.crossref`` checks that every reference names a resource of the set, and the kind's
adapter (``controllers/<kind>/kind.py``) takes its model and its dependencies from the same
declaration, so the three cannot disagree. ``KINDS`` is the one table of kinds: each line names
a kind's spec declaration and its controller, read by ``validate``, ``schema``, ``plan``, the
engine and the daemon alike.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: this table is read by ``status``, which loads no spec model
    from specs.loader import PathKey
    from specs.models import Strict
    from specs.rules import Finding


@dataclass(frozen=True)
class Reference:
    """A field that names another resource: where it is, the kind it names, and its value
    (None when it is not set). ``checked``: the set must hold it; False where the kind's
    own rules say more about a missing one (an Experiment's template). ``ready_first``: the
    engine acts on this resource only once the one named is Ready at its current spec
    (``WaitingFor<Kind>`` until then; its change wakes this one)."""

    path: PathKey
    kind: str
    name: Callable[[Any], str | None]
    checked: bool = True
    ready_first: bool = False


@dataclass(frozen=True)
class SpecKind:
    name: str
    model: type[Strict]
    rules: Callable[[Any], list[Finding]] | None = None
    references: tuple[Reference, ...] = ()
    set_rules: Callable[[list[Any]], list[tuple[Any, Finding]]] | None = None
    """Its rules over the whole spec set (no observation), each finding attached to the
    resource whose document should change: GPUs and ports claimed twice, run IDs used twice."""
    hash_excludes: frozenset[str] = frozenset()
    """Fields of its ``spec`` that its hash leaves out: a change of one is no reason to act
    (a Deployment's readiness budget: waiting longer recreates nothing)."""
    derives: Callable[[Any, str], list[Any]] | None = None
    """Resources of other kinds that one of this kind makes (given it and its spec hash),
    with the field of its document they come from (``derived_from``): a Deployment's
    ``spec.promotion`` makes the Experiment that qualifies its candidates. They join the spec
    set as if written, and what is wrong with one is said at that field."""
    derived_from: PathKey = ()

    @property
    def depends_on(self) -> tuple[str, ...]:
        """The kinds its references name: converged before it, deleted after it, and whose
        changes wake it (the registry orders kinds by these)."""
        return tuple(sorted({ref.kind for ref in self.references}))

    def named(self, resource: Any) -> Iterator[tuple[Reference, str]]:
        """Each reference ``resource`` sets, with the name it gives."""
        for ref in self.references:
            name = ref.name(resource)
            if name:
                yield ref, name


@dataclass(frozen=True)
class KindEntry:
    """One line of the table of kinds: its name, and where its spec declaration (a
    ``SpecKind``), its controller (a class of the kind contract, ``controllers.contract.Kind``)
    and what its records say about themselves (a ``controllers.facts.Facts``; "" for none)
    live, each as ``module:attribute``, named and not imported: ``status`` loads only the
    facts it shows, ``validate`` and ``schema`` the spec side, ``plan``, ``apply`` and the
    daemon the controllers too (``reconciler.kinds``)."""

    name: str
    spec: str
    controller: str
    facts: str = ""


KINDS: tuple[KindEntry, ...] = (
    # The one table: a new kind is its folder (its spec declaration and its controller) and
    # one line here; nothing else of the CLI, the engine or the daemon names it.
    KindEntry("Host", "specs.declarations:HOST", "controllers.kinds.host.kind:HostKind",
              "controllers.kinds.host.facts:HostStatusFacts"),
    KindEntry("Deployment", "specs.declarations:DEPLOYMENT",
              "controllers.kinds.deployment.kind:DeploymentKind",
              "controllers.kinds.deployment.facts:DeploymentStatusFacts"),
    KindEntry("StreamSet", "specs.declarations:STREAMSET",
              "controllers.kinds.streamset.kind:StreamSetKind",
              "controllers.kinds.streamset.facts:StreamSetStatusFacts"),
    KindEntry("Experiment", "specs.declarations:EXPERIMENT",
              "controllers.kinds.experiments.kind:ExperimentKind",
              "controllers.kinds.experiments.facts:ExperimentStatusFacts"),
)


def load(reference: str) -> Any:
    """The object ``module:attribute`` names (a table entry's spec or controller)."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


class SpecKinds(Mapping[str, SpecKind]):
    """Every kind's spec declaration by name, from ``KINDS`` (loaded on first use), plus those
    registered while a process runs (tests' toy kinds)."""

    def __init__(self) -> None:
        self._kinds: dict[str, SpecKind] | None = None

    def _loaded(self) -> dict[str, SpecKind]:
        if self._kinds is None:
            kinds = {}
            for entry in KINDS:
                declared = load(entry.spec)
                if not isinstance(declared, SpecKind) or declared.name != entry.name:
                    raise TypeError(f"the table of kinds names {entry.spec} for kind "
                                    f"{entry.name}, which is not that kind's SpecKind")
                kinds[entry.name] = declared
            self._kinds = kinds
        return self._kinds

    def __getitem__(self, name: str) -> SpecKind:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def register(self, kind: SpecKind) -> None:
        """Add a kind's declaration (the kind registry does, for a kind not in the table)."""
        self._loaded()[kind.name] = kind

    def unregister(self, name: str) -> None:
        if entry(name) is None:  # a kind of the table stays
            self._loaded().pop(name, None)


SPEC_KINDS = SpecKinds()


def entry(name: str) -> KindEntry | None:
    """``name``'s line of the table (None for a kind that is not in it)."""
    return next((e for e in KINDS if e.name == name), None)


def register(kind: SpecKind) -> None:
    """Add a kind's declaration (the kind registry does, for a kind that is not in the table)."""
    SPEC_KINDS.register(kind)


def unregister(name: str) -> None:
    SPEC_KINDS.unregister(name)
