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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from controllers.facts import RunOutcome, seconds_since
from controllers.kinds.deployment.facts import (
    ACCEPTED_KEPT,
    BAKING,
    PROMOTED,
    QUALIFYING,
    REJECTED,
    ROLLED_BACK,
    DeploymentStatusFacts,
    PromotionFacts,
)
from specs.experiment import Experiment, qualification_name
from specs.models import Deployment
from specs.validate import SpecSet
from state.errors import StateError
from state.evidence import Evidence, EvidenceError
from state.keys import Key
from state.models import ResourceStatus, stamp, utc_now
from state.store import Store

QUALIFIED_FIELDS = ("image", "model", "env")  # what a candidate is; the rest is not measured
APPROVE, RERUN = "approve", "rerun"  # what ``reconciler promote`` asks (record.requests)
ATTEMPT = "-r"  # a rerun's run ID: the candidate's, then -r1, -r2, ...
OVERRIDE_FILE = "override.json"
log = structlog.get_logger("controllers.promotion")
MAX_ATTEMPTS = 99  # within the run ID's 63 characters; a new commit is a new candidate
REJECTED_REASON = "PromotionRejected"
EVIDENCE_DIR = "evidence"  # a run's bundle, where an Experiment without evidenceRoot keeps it
BUNDLE_COPIES = "evidence-copies"  # where a bundle the store keeps (etcd) is unpacked


@dataclass(frozen=True)
class Qualification:
    """The run that qualifies the Deployment's candidate, and what its record says of it."""

    experiment: Key
    run_id: str  # this candidate's run (its first, or the attempt ``promote --rerun`` asked)
    outcome: RunOutcome  # its record's run facts (of another run ID: not this candidate's)
    room: str  # where the candidate is measured, for ``plan``
    gates: str  # what it must measure up to, for ``plan``
    approved: bool = False  # ``promote --approve``: its rejection is let through, once
    rolled_back: str = ""  # why it was rolled back after its bake ("" if it was not)

    @property
    def result(self) -> str | None:
        """This candidate's verdict (None: not measured yet)."""
        return self.outcome.result if self.outcome.run_id == self.run_id else None


def current_run(asked: PromotionFacts | None, base: str, candidate: str) -> str:
    """The run that qualifies ``candidate`` now: ``base`` (its run ID as the spec makes it),
    or the attempt a person asked for (``base-rN``) once the Deployment asked for it."""
    if asked is not None and asked.candidate == candidate and asked.run.startswith(
            base + ATTEMPT):
        return asked.run
    return base


def next_attempt(run_id: str, base: str) -> str | None:
    """The run ID of the next attempt at the same candidate (None past ``MAX_ATTEMPTS``)."""
    done = int(run_id[len(base) + len(ATTEMPT):] or 0) if run_id != base else 0
    return f"{base}{ATTEMPT}{done + 1}" if done < MAX_ATTEMPTS else None


def qualification(dep: Deployment, spec_set: SpecSet, store: Store) -> Qualification | None:
    """``dep``'s qualification run (None without ``spec.promotion``), with what a person
    asked of it: a rerun (the next attempt's run ID) or an approval of its rejection."""
    promotion = dep.spec.promotion
    made = spec_set.get("Experiment", qualification_name(dep.metadata.name))
    if promotion is None or not isinstance(made, Experiment) or made.spec.type != "promotion":
        return None
    key = Key("Experiment", made.metadata.name)
    record = store.load(Key("Deployment", dep.metadata.name))
    asked = DeploymentStatusFacts.of(record).promotion
    base = made.spec.runId
    run_id = current_run(asked, base, made.spec.promotion.candidate)
    outcome = RunOutcome.of(store.load(key))
    if outcome.run_id != run_id:  # the record holds a later run: this one's bundle says
        root = Path(made.spec.evidenceRoot) if made.spec.evidenceRoot else (
            store.root / EVIDENCE_DIR)
        outcome = judged_before(store, root, run_id) or outcome
    requests = record.requests if record is not None else {}
    held = outcome.run_id == run_id and outcome.result not in (None, "PASS")
    if held and requests.get(RERUN) in ("", run_id):  # "": the held one, whichever it is
        run_id = next_attempt(run_id, base) or run_id
    room = promotion.candidate
    gates = promotion.gates
    return Qualification(
        experiment=key, run_id=run_id, outcome=outcome,
        room=f"port {room.port}" + (f", GPUs {', '.join(map(str, room.gpus))}" if room.gpus
                                    else ", no GPU"),
        gates=f"p95 latency at most {gates.maxP95Regression} slower, no more dropped chunks, "
              f"every stream's answers its own, at most {gates.maxGpuMemoryGrowthMiB} MiB of "
              "GPU memory left" + (f", at most {gates.maxCapacityLoss} stream(s) of capacity "
                                   "lost" if gates.capacity is not None else ""),
        approved=held and requests.get(APPROVE) == run_id,
        rolled_back=(asked.reason or "it failed its bake") if asked is not None and (
            asked.phase == ROLLED_BACK and asked.run == run_id) else "")


def judged_before(store: Store, root: Path, run_id: str) -> RunOutcome | None:
    """The verdict run ``run_id`` reached before, read from its bundle (its folder under
    ``root``, or the copy the store keeps: with records in etcd, another replica may have run
    it): an Experiment's record holds its latest run only, and a candidate committed again
    (a revert) is judged by the run it had, never run twice. None: it never ran to a
    verdict."""
    folder = _bundle(root, run_id) or _bundle(store.root / BUNDLE_COPIES, run_id)
    if folder is None:  # unpacked once from the store, then read where it was unpacked
        try:
            copy = store.bundle(run_id, store.root / BUNDLE_COPIES)
        except StateError:
            return None
        if copy is None:
            return None
        folder = Evidence(copy)
    status = folder.status_document()
    if status is None or status.result is None:
        return None
    return RunOutcome(run_id=run_id, phase="Done", result=status.result,
                      reason=status.reason, evidence=str(folder.folder))


def _bundle(root: Path, run_id: str) -> Evidence | None:
    try:
        return Evidence.open(root, run_id)
    except EvidenceError:
        return None


def qualifies(applied: dict[str, object] | None, new: dict[str, object],
              image_moved: bool) -> bool:
    """A change the candidate must be measured for: its image (or the image's content), its
    model or its environment; an unknown earlier spec counts as one (never replaced blind)."""
    if applied is None or image_moved:
        return True
    return any(applied.get(name) != new.get(name) for name in QUALIFIED_FIELDS)


def asking(candidate: str, run_id: str, image: str) -> PromotionFacts:
    """What the record says of ``candidate`` while ``run_id`` qualifies it."""
    return PromotionFacts(phase=QUALIFYING, candidate=candidate, run=run_id, image=image,
                          since=utc_now())


def ask(store: Store, resource: Key, facts: PromotionFacts) -> None:
    """Write that a candidate is to be qualified (``asking``; a rerun asked for is taken)."""
    _phase(store, resource, facts, taken=RERUN)


def rejection(candidate: str, found: Qualification, image: str) -> PromotionFacts:
    """What the record says of ``candidate`` when it was not promoted, and why."""
    return PromotionFacts(
        phase=REJECTED, candidate=candidate, run=found.run_id, image=image,
        reason=f"{found.result}: {found.outcome.reason or 'no reason recorded'}",
        evidence=found.outcome.evidence, since=utc_now())


def promoted(record: ResourceStatus, candidate: str, found: Qualification, image: str,
             before: str | None, previous: dict[str, Any] | None, bake_s: int,
             live: tuple[list[str], float | None, float | None] = ([], None, None)) -> None:
    """In the record a promotion's recreate writes: the candidate runs now, Baking for
    ``bake_s`` with the spec it replaced kept for a rollback (an approval asked for is
    taken, and said)."""
    known = DeploymentStatusFacts.of(record)
    now = datetime.now(UTC)
    watched = bake_s > 0 and previous is not None
    known.promotion = PromotionFacts(
        phase=BAKING if watched else PROMOTED, candidate=candidate, run=found.run_id,
        image=image, evidence=found.outcome.evidence, since=stamp(now), promoted_from=before,
        reason=override(found) or None, previous_spec=previous if watched else None,
        bake_until=stamp(now + timedelta(seconds=bake_s)) if watched else None,
        live_watched=live[0] or None if watched else None,
        live_before_ms=live[1] if watched else None, live_limit_ms=live[2] if watched else None)
    kept = {k: v for k, v in (known.accepted or {}).items() if k != candidate}
    known.accepted = dict([*kept.items(), (candidate, found.run_id)][-ACCEPTED_KEPT:])
    known.put(record)
    record.requests.pop(APPROVE, None)


def serving(record: ResourceStatus, candidate: str, gap_s: float | None) -> None:
    """The promoted candidate serves: the gap in service its switch cost, once (``gap_s``,
    measured in this pass; else from the promotion's start, when its model loaded over
    several passes)."""
    known = DeploymentStatusFacts.of(record)
    found = known.promotion
    if (found is None or found.candidate != candidate or found.phase not in (BAKING, PROMOTED)
            or found.gap_seconds is not None):
        return
    gap = gap_s if gap_s is not None else seconds_since(found.since, None)
    known.promotion = found.model_copy(update={
        "gap_seconds": None if gap is None else round(gap, 3)})
    known.put(record)


def baking(record: ResourceStatus | None, candidate: str) -> PromotionFacts | None:
    """The promotion of ``candidate`` under watch, while its bake lasts (None otherwise)."""
    found = DeploymentStatusFacts.of(record).promotion
    if (found is None or found.phase != BAKING or found.candidate != candidate
            or found.previous_spec is None or not found.bake_until):
        return None
    return found


def bake_left_s(found: PromotionFacts, now: datetime | None = None) -> float:
    """Seconds of its bake left (0 once it is over)."""
    left = -(seconds_since(found.bake_until, now) or 0.0)
    return max(0.0, left)


def bake_looked(record: ResourceStatus, now: PromotionFacts) -> None:
    """What a look during the bake found (its looks in a row over the limit), if the record
    still bakes that candidate."""
    known = DeploymentStatusFacts.of(record)
    found = known.promotion
    if found is not None and found.phase == BAKING and found.candidate == now.candidate:
        known.promotion = found.model_copy(update={"live_over": now.live_over})
        known.put(record)


def baked(record: ResourceStatus) -> None:
    """The bake is over with no breach: the candidate is the running version for good."""
    known = DeploymentStatusFacts.of(record)
    if known.promotion is not None and known.promotion.phase == BAKING:
        known.promotion = known.promotion.model_copy(update={
            "phase": PROMOTED, "previous_spec": None, "bake_until": None})
        known.put(record)


def rolled_back(record: ResourceStatus, why: str) -> None:
    """The candidate failed its bake: the version it replaced runs again, and it stays out."""
    known = DeploymentStatusFacts.of(record)
    if known.promotion is not None:
        known.promotion = known.promotion.model_copy(update={
            "phase": ROLLED_BACK, "reason": why, "previous_spec": None, "bake_until": None,
            "since": utc_now()})
        known.put(record)


def override(found: Qualification) -> str:
    """What a promotion let through by a person says ("" for one that passed)."""
    if not found.approved:
        return ""
    return (f"let through by an operator (reconciler promote --approve): run {found.run_id} "
            f"ended {found.result} ({found.outcome.reason or 'no reason recorded'})")


def note_override(bundle: Path, said: str) -> None:
    """Say in the qualification's bundle that a person let its rejected candidate through:
    ``override.json`` and an event beside the measured verdict (which stands), sealed again so
    ``evidence --verify`` holds. A bundle that cannot be written keeps its word elsewhere (the
    Deployment's record and events say it): never a failed promotion for it."""
    evidence = Evidence(bundle)
    try:
        evidence.write_json(OVERRIDE_FILE, {"override": said, "at": utc_now()})
        evidence.event("Override", said)
        evidence.seal()
    except (OSError, EvidenceError) as exc:
        log.warning("promotion.override_unwritten", bundle=str(bundle), reason=str(exc))


def is_news(record: ResourceStatus | None, facts: PromotionFacts) -> bool:
    """Whether the record says something else than that this candidate's run is in this
    phase."""
    now = DeploymentStatusFacts.of(record).promotion
    return now is None or (now.phase, now.candidate, now.run) != (
        facts.phase, facts.candidate, facts.run)


def put_phase(record: ResourceStatus, facts: PromotionFacts) -> None:
    """Write ``facts`` into ``record`` unless it says this candidate is in this phase
    already (a phase written once keeps the time it began)."""
    if is_news(record, facts):
        known = DeploymentStatusFacts.of(record)
        known.promotion = facts
        known.put(record)


def _phase(store: Store, resource: Key, facts: PromotionFacts, taken: str = "") -> bool:
    """Write ``facts`` unless the record says this candidate is in this phase already
    (``taken``: a request this answers, removed with it); True when that is news."""
    news = [False]

    def mutate(st: ResourceStatus) -> None:
        if taken:
            st.requests.pop(taken, None)
        news[0] = is_news(st, facts)
        put_phase(st, facts)
    store.update(resource, mutate)
    return news[0]
