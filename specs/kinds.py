"""Every kind's spec side, declared once: its model, its observation-free rules, and the
resources it references.

``specs.validate`` parses a document with its kind's model and checks its rules,
``specs.crossref`` checks that every reference names a resource of the set, and the kind's
adapter (``controllers/<kind>/kind.py``) takes its model and its dependencies from the same
declaration, so the three cannot disagree. A new kind declares its ``SpecKind`` and is
registered with the kind registry, which adds it here (``register``): one table, changed from
one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specs.experiment import Experiment, check_experiment
from specs.images import check_host
from specs.loader import PathKey
from specs.models import Deployment, Host, StreamSet, Strict
from specs.rules import Finding, check_deployment
from specs.streamrules import check_streamset


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
    facts: str = ""
    """``module:Class`` of what its records say about themselves (a ``controllers.facts.Facts``),
    named, not imported: ``status NAME`` imports only the one it shows."""

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


HOST = SpecKind("Host", Host, check_host, facts="controllers.host.facts:HostStatusFacts")
DEPLOYMENT = SpecKind("Deployment", Deployment, check_deployment, (
    Reference(("spec", "host"), "Host", lambda d: d.spec.host),),
    facts="controllers.deployment.facts:DeploymentStatusFacts")
STREAMSET = SpecKind("StreamSet", StreamSet, check_streamset, (
    Reference(("spec", "deployment"), "Deployment", lambda s: s.spec.deployment,
              ready_first=True),
    Reference(("spec", "publisher", "host"), "Host", lambda s: s.spec.publisher.host)),
    facts="controllers.streamset.facts:StreamSetStatusFacts")
EXPERIMENT = SpecKind("Experiment", Experiment, check_experiment, (
    Reference(("spec", "template"), "Deployment", lambda e: e.spec.template, checked=False),),
    facts="controllers.experiments.facts:ExperimentStatusFacts")

SPEC_KINDS: dict[str, SpecKind] = {k.name: k for k in (HOST, DEPLOYMENT, STREAMSET, EXPERIMENT)}
_BUILT_IN = frozenset(SPEC_KINDS)


def register(kind: SpecKind) -> None:
    """Add a kind's declaration (the kind registry does, for a kind that is not built in)."""
    SPEC_KINDS[kind.name] = kind


def unregister(name: str) -> None:
    if name not in _BUILT_IN:
        SPEC_KINDS.pop(name, None)
