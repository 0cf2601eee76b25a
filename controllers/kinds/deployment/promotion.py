"""A Deployment with ``spec.promotion``: a new image, model or environment is measured first.

The Deployment does not measure anything itself. Its ``spec.promotion`` makes an Experiment
(``specs.experiment.derive_qualification``) whose run qualifies the Deployment's current spec,
the candidate, against the service that runs now; this module is the Deployment's side of it:

- ``qualification``: that run, as the spec set names it and its record says it stands;
- ``qualifies``: whether a change is one to qualify (image, model or environment; the
  image's content, a moved tag; anything else replaces the container as before);
- the plan (``plan.py``) turns both into ``qualify`` (ask for the run, change nothing),
  ``recreate`` (the run PASSed: promote) or a hold (it did not: the running version serves on);
- ``asked``, ``held`` and ``promoted`` write what the record says of it, with an event when
  the candidate's phase changes.

The run is asked for by writing ``promotion.phase: Qualifying`` with the candidate's hash in
this Deployment's record: the Experiment launches its run only then (``PromotionType``), so a
Deployment that runs its spec already never measures itself, and a candidate is measured once.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.facts import RunOutcome
from controllers.kinds.deployment.facts import DeploymentStatusFacts, PromotionFacts
from specs.experiment import qualification_name
from specs.models import Deployment
from specs.validate import SpecSet
from state.keys import Key
from state.models import ResourceStatus, utc_now
from state.store import Store

QUALIFIED_FIELDS = ("image", "model", "env")  # what a candidate is; the rest is not measured
QUALIFYING, REJECTED, PROMOTED = "Qualifying", "Rejected", "Promoted"
REJECTED_REASON = "PromotionRejected"


@dataclass(frozen=True)
class Qualification:
    """The run that qualifies the Deployment's candidate, and what its record says of it."""

    experiment: Key
    run_id: str
    outcome: RunOutcome  # its record's run facts (of another run ID: not this candidate's)
    room: str  # where the candidate is measured, for ``plan``
    gates: str  # what it must measure up to, for ``plan``

    @property
    def result(self) -> str | None:
        """This candidate's verdict (None: not measured yet)."""
        return self.outcome.result if self.outcome.run_id == self.run_id else None


def qualification(dep: Deployment, spec_set: SpecSet, store: Store) -> Qualification | None:
    """``dep``'s qualification run (None without ``spec.promotion``)."""
    promotion = dep.spec.promotion
    made = spec_set.get("Experiment", qualification_name(dep.metadata.name))
    if promotion is None or made is None:
        return None
    key = Key("Experiment", made.metadata.name)
    room = promotion.candidate
    gates = promotion.gates
    return Qualification(
        experiment=key, run_id=str(getattr(made.spec, "runId", "")),
        outcome=RunOutcome.of(store.load(key)),
        room=f"port {room.port}" + (f", GPUs {', '.join(map(str, room.gpus))}" if room.gpus
                                    else ", no GPU"),
        gates=f"p95 latency at most {gates.maxP95Regression} slower, no more dropped chunks, "
              f"every stream's answers its own, at most {gates.maxGpuMemoryGrowthMiB} MiB of "
              "GPU memory left")


def qualifies(applied: dict[str, object] | None, new: dict[str, object],
              image_moved: bool) -> bool:
    """A change the candidate must be measured for: its image (or the image's content), its
    model or its environment; an unknown earlier spec counts as one (never replaced blind)."""
    if applied is None or image_moved:
        return True
    return any(applied.get(name) != new.get(name) for name in QUALIFIED_FIELDS)


def asked(store: Store, resource: Key, candidate: str, run_id: str, image: str) -> bool:
    """Write that ``candidate`` is to be qualified by ``run_id``; True when that is news."""
    return _phase(store, resource, PromotionFacts(
        phase=QUALIFYING, candidate=candidate, run=run_id, image=image, since=utc_now()))


def held(store: Store, resource: Key, candidate: str, found: Qualification, image: str) -> bool:
    """Write that ``candidate`` was not promoted, and why; True when that is news."""
    return _phase(store, resource, PromotionFacts(
        phase=REJECTED, candidate=candidate, run=found.run_id, image=image,
        reason=f"{found.result}: {found.outcome.reason or 'no reason recorded'}",
        evidence=found.outcome.evidence, since=utc_now()))


def promoted(record: ResourceStatus, candidate: str, found: Qualification,
             image: str, before: str | None) -> None:
    """In the record a promotion's recreate writes: the candidate runs now."""
    known = DeploymentStatusFacts.of(record)
    known.promotion = PromotionFacts(phase=PROMOTED, candidate=candidate, run=found.run_id,
                                     image=image, evidence=found.outcome.evidence,
                                     since=utc_now(), promoted_from=before)
    known.put(record)


def _phase(store: Store, resource: Key, facts: PromotionFacts) -> bool:
    """Write ``facts`` unless the record says this candidate is in this phase already."""
    news = [False]

    def mutate(st: ResourceStatus) -> None:
        known = DeploymentStatusFacts.of(st)
        now = known.promotion
        if now is not None and (now.phase, now.candidate, now.run) == (
                facts.phase, facts.candidate, facts.run):
            return
        news[0] = True
        known.promotion = facts
        known.put(st)
    store.update(resource, mutate)
    return news[0]
