"""What a Deployment's pass does for ``spec.promotion``: the acting side of ``promotion``.

``plan`` said what a candidate needs (``qualify``, a hold, a promoting ``recreate``, a
``rollback``); these carry it out and say it in the record, the history and the events:

- ``qualifying``: ask for the qualification run and change nothing (the running version serves
  on); looked at again every ``QUALIFY_POLL_S`` and when the run ends (its verdict wakes us);
- ``held``: the candidate did not pass (or was rolled back): Ready, reason PromotionRejected,
  the record's generations apart (not in sync), an event when that is news;
- ``promote``: as its recreate begins, the candidate is recorded as promoted (Baking while
  ``bakeSeconds`` lasts, with the spec it replaced kept for a rollback), an event, an override
  said in the bundle; ``ready``: once it serves, the gap in service the switch cost;
- ``watched``: during the bake, look again when it ends; then the candidate is Promoted;
- ``roll_back``: the promoted container died during its bake: recreate the version it
  replaced from its kept spec, and hold the candidate out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from controllers.actions import Action
from controllers.contract import Outcome, PassContext, Report, Result, done
from controllers.errors import PermanentError, ReadinessFailed
from controllers.kinds.deployment import bake, promotion
from controllers.kinds.deployment.controller import DeploymentController, resolve_desired
from controllers.kinds.deployment.facts import QUALIFYING, DeploymentStatusFacts
from controllers.kinds.deployment.plan import Desired, Plan
from controllers.kinds.deployment.readiness import ReadinessResult
from controllers.kinds.host.pulls import Pulls
from specs.models import DeploymentSpec
from state.models import ResourceStatus

QUALIFY_POLL_S = 10.0  # a qualifying Deployment looks at its run this often (and at its end)


def decided(ctx: PassContext, controller: DeploymentController, desired: Desired,
            plan: Plan) -> Result | None:
    """The pass, when its plan is about a candidate and not a container to converge: asking
    for its qualification, holding it out, or rolling it back (None: converge as usual)."""
    if plan.held is not None:
        return held(ctx, desired, plan.held)
    if (asked := plan.qualifying) is not None:
        return qualifying(ctx, controller, desired, plan, asked)
    if (back := plan.rolling_back) is not None:
        return roll_back(ctx, controller, desired, plan, back)
    return None


def qualifying(ctx: PassContext, controller: DeploymentController, desired: Desired,
               plan: Plan, asked: Action) -> Result:
    """Ask for the candidate's qualification and change nothing: the running version serves
    on while its run measures both."""
    found = desired.qualification
    assert found is not None  # a qualify action comes from one
    store, resource = ctx.services.store, desired.resource
    controller.record_desired(desired, plan.record)
    facts = promotion.asking(desired.spec_hash, found.run_id, desired.deployment.spec.image)
    if promotion.is_news(store.load(resource), facts):  # said before it is written: a
        controller.history(resource, asked, "ok", detail=found.run_id)  # reader of the
        store.events.append(resource, "Normal", "Qualifying", str(asked))  # phase finds it
    promotion.ask(store, resource, facts)
    ctx.services.progress(resource, f"{asked.verb} {asked.target} because {asked.cause}")
    message = (f"qualifying candidate {desired.deployment.spec.image} by run {found.run_id} "
               f"({found.experiment}); the running version serves on")
    controller.progressing(resource, QUALIFYING, message)
    return Result(resource, Outcome.RECHECK, message, QUALIFYING,
                  after_s=QUALIFY_POLL_S, wake=(found.experiment,))


def held(ctx: PassContext, desired: Desired, why: str) -> Result:
    """The candidate is out: the running version stays, Ready and untouched, and the record
    says the spec is not applied (not in sync) and why, gate by gate. The phase is written
    with the Ready condition, in one write: no reader sees one without the other."""
    found = desired.qualification
    assert found is not None  # a hold comes from one
    store, resource = ctx.services.store, desired.resource
    report = Report(detail=why)
    if not found.rolled_back:  # a rolled-back candidate's record says so already
        out = promotion.rejection(desired.spec_hash, found, desired.deployment.spec.image)
        if promotion.is_news(store.load(resource), out):
            store.events.append(resource, "Warning", promotion.REJECTED_REASON, why)
        report = Report(detail=why, facts=lambda st: promotion.put_phase(st, out))
    return done(resource, f"{promotion.REJECTED_REASON}: {why}", promotion.REJECTED_REASON,
                report=report)


def promote(ctx: PassContext, desired: Desired, plan: Plan) -> None:
    """Record the promotion as its recreate begins (Baking, with a bake, and the spec it
    replaces kept for a rollback; Promoted without one): a model that loads for minutes is
    promoted all that time. Said in an event and, when a person let it through, in its
    bundle."""
    found = desired.qualification
    promotion_spec = desired.deployment.spec.promotion
    assert found is not None  # a promotion comes from one
    assert promotion_spec is not None
    record = plan.record
    image = DeploymentStatusFacts.of(record).image or "?"
    old = record.observed_generation if record is not None else None
    before = f"{image} (spec {old[:12]})" if old else image
    previous = record.applied_spec if record is not None else None
    live = bake.watch_for(ctx, desired.resource, promotion_spec.gates.p95_regression)
    why = promotion.override(found) or f"qualification run {found.run_id} passed every gate"
    ctx.services.store.events.append(desired.resource, "Normal", "Promoted", (
        f"{desired.deployment.spec.image} promoted: {why} (evidence {found.outcome.evidence})"
        + (f"; watched for {promotion_spec.bakeSeconds}s: {_watching(live)}"
           if promotion_spec.bakeSeconds else "")))  # said first: a reader of the phase finds it
    ctx.services.store.update(desired.resource, lambda st: promotion.promoted(
        st, desired.spec_hash, found, desired.deployment.spec.image, before, previous,
        promotion_spec.bakeSeconds, live))
    if found.approved and found.outcome.evidence:
        promotion.note_override(Path(found.outcome.evidence), why)


def _watching(live: tuple[list[str], float | None, float | None]) -> str:
    keys, before, limit = live
    if before is None or limit is None:
        return "its container's life (nothing reads a latency of it)"
    return (f"its container's life and the caption latency {', '.join(keys)} read of it "
            f"({before:.0f} ms of the version it replaces; at most {limit:.0f} ms)")


def ready(desired: Desired, result: ReadinessResult) -> Callable[[ResourceStatus], None] | None:
    """The ready facts of a pass, with the gap in service a promotion cost once its candidate
    is ready (from the old container's stop: measured in this pass, or from the record's
    ``stopped_at`` when the model loaded over several passes)."""
    facts = result.facts
    if facts is None:
        return None

    def mutate(st: ResourceStatus) -> None:
        facts(st)
        promotion.serving(st, desired.spec_hash, result.gap_s)
    return mutate


def images_kept(ctx: PassContext, desired: Desired, plan: Plan) -> list[str]:
    """The images a prune must leave: the one it runs and, while it bakes, the one a rollback
    would run again (read again after a promotion: this pass began it)."""
    record = ctx.services.store.load(desired.resource) if plan.promoting else plan.record
    watched = promotion.baking(record, desired.spec_hash)
    kept = [desired.deployment.spec.image]
    if watched is not None and watched.previous_spec is not None:
        image = watched.previous_spec.get("image")
        kept += [image] if isinstance(image, str) else []
    return kept


def watched(ctx: PassContext, controller: DeploymentController, desired: Desired,
            plan: Plan, said: Report) -> Result | None:
    """During the bake, a pass that found the candidate serving is done and looks again: at
    the bake's end, or every ``bake.BAKE_POLL_S`` when live numbers are watched (its readers
    woken then, so what they read is fresh); a breach of them rolls it back. Once the bake has
    ended, the candidate is Promoted. None: nothing is baking (or ``apply``, which does not
    stay to watch)."""
    store, resource = ctx.services.store, desired.resource
    found = promotion.baking(store.load(resource) if plan.promoting else plan.record,
                             desired.spec_hash)
    if found is None:
        return None
    left = promotion.bake_left_s(found)
    if left > 0:
        if ctx.wait_ready:
            return None  # `apply` ends here; the daemon watches the rest of the bake
        now, why = bake.check(store, found)
        if why is not None:
            return roll_back(ctx, controller, desired, plan, Action(
                "rollback", f"container {desired.container_name}",
                f"the promoted candidate failed its bake: {why}; back to "
                f"{found.promoted_from or 'the version it replaced'}"))
        if now != found:
            store.update(resource, lambda st: promotion.bake_looked(st, now))
        poll = left if found.live_limit_ms is None else min(left, bake.BAKE_POLL_S)
        return done(resource, f"Ready: baking, watched {left:.0f}s more", "Ready",
                    changed=plan.changes, report=said, after_s=poll,
                    wake=bake.watched_keys(found))
    store.events.append(resource, "Normal", "Baked", (
        f"{desired.deployment.spec.image} served through its bake: promoted for good"))
    return done(resource, "Ready: promoted, baked", "Ready", changed=True,
                report=Report(detail="promoted and baked", facts=promotion.baked))


def breach(desired: Desired, plan: Plan, failed: ReadinessFailed) -> Action | None:
    """The rollback a promoted candidate's failure calls for during its bake (it exited, or
    stopped serving, between the plan and its readiness check); None outside a bake."""
    watched = promotion.baking(plan.record, desired.spec_hash)
    if watched is None:
        return None
    return Action("rollback", f"container {desired.container_name}", (
        f"the promoted candidate failed its bake: {str(failed).splitlines()[0]}; back to "
        f"{watched.promoted_from or 'the version it replaced'}"))


def roll_back(ctx: PassContext, controller: DeploymentController, desired: Desired,
              plan: Plan, action: Action) -> Result:
    """The promoted candidate died during its bake: the version it replaced is created again
    from the spec the promotion kept (its image kept on the Host), and the candidate stays
    out until a new commit. The rollback waits for its readiness in this pass."""
    assert ctx.spec_set is not None
    found = promotion.baking(ctx.services.store.load(desired.resource), desired.spec_hash)
    if found is None or found.previous_spec is None:
        raise PermanentError("a rollback needs the spec the promotion replaced, and the record "
                             "no longer holds it")
    store, resource = ctx.services.store, desired.resource
    previous = desired.deployment.model_copy(
        update={"spec": DeploymentSpec.model_validate(found.previous_spec)})
    back = dataclasses.replace(
        resolve_desired(previous, ctx.spec_set, controller.session, ctx.services.instance,
                        store, Pulls.of(ctx.services)), qualification=None)
    if back.pull is not None:
        raise PermanentError(f"cannot roll back to {previous.spec.image}: {back.pull.cause}")
    why = f"{action.cause} (run {found.run})"
    controller.history(resource, action, "ok", detail=found.run)
    store.events.append(resource, "Warning", "RolledBack", str(action))  # said first, as above
    store.update(resource, lambda st: promotion.rolled_back(st, why))
    ctx.services.progress(resource, f"{action.verb} {action.target} because {action.cause}")
    result = controller.apply(back, controller.plan(back), ctx.timeout_s, ctx.revision)
    return done(resource, f"RolledBack: {why}", "RolledBack", changed=True,
                report=Report(detail=f"rolled back: {why}", facts=result.facts))
