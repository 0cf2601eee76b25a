"""A Deployment with ``spec.promotion`` plans ``qualify`` for a candidate, ``recreate`` once its
qualification passed, and nothing (held) once it did not; a change that is not a candidate's
(its image, model or environment) is replaced as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from controllers.facts import RunOutcome
from controllers.kinds.deployment import promotion
from controllers.kinds.deployment.facts import DeploymentStatusFacts, PromotionFacts
from controllers.kinds.deployment.plan import Desired, plan
from controllers.kinds.deployment.promotion import Qualification, qualifies
from state.evidence import Evidence
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store
from tests.controllers.test_plan import INSTANCE, _container, _desired

RUN = "vlm-q-0123456789abcdef"
EXPERIMENT = Key("Experiment", "vlm-promotion")


def _qualified(desired: Desired, outcome: RunOutcome | None = None) -> Desired:
    found = Qualification(EXPERIMENT, RUN, outcome or RunOutcome(), "port 18100, no GPU",
                          "p95 latency at most 10% slower")
    return dataclasses.replace(desired, qualification=found)


def _record(old: Desired) -> ResourceStatus:
    return ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm",
                          applied_spec=old.deployment.spec.model_dump(mode="json"))


def test_a_new_environment_is_qualified_before_anything_is_replaced() -> None:
    old, new = _desired("  env: {X: 1}\n"), _qualified(_desired("  env: {X: 2}\n"))
    result = plan(new, _container(old), _record(old), INSTANCE)
    assert [a.verb for a in result.actions] == ["qualify"]
    cause = result.actions[0].cause
    assert "env.X '1' → '2'" in cause, cause
    assert f"by run {RUN} (Experiment/vlm-promotion) in port 18100, no GPU" in cause, cause
    assert "gates: p95 latency at most 10% slower" in cause
    assert result.qualifying is result.actions[0]
    assert result.held is None
    assert not result.promoting
    # Without spec.promotion the same change is a recreate, at once.
    blind = plan(_desired("  env: {X: 2}\n"), _container(old), _record(old), INSTANCE)
    assert [a.verb for a in blind.actions] == ["recreate"]


def test_a_passed_qualification_promotes_and_a_failed_one_holds() -> None:
    old = _desired("  env: {X: 1}\n")
    passed = _qualified(_desired("  env: {X: 2}\n"), RunOutcome(run_id=RUN, result="PASS"))
    result = plan(passed, _container(old), _record(old), INSTANCE)
    assert [a.verb for a in result.actions] == ["recreate"]
    assert result.promoting
    assert f"promoted: qualification run {RUN} passed every gate" in result.actions[0].cause
    failed = _qualified(_desired("  env: {X: 2}\n"), RunOutcome(
        run_id=RUN, result="FAIL", reason="latency: p95 1200 ms against p95 800 ms"))
    held = plan(failed, _container(old), _record(old), INSTANCE)
    assert held.actions == []
    assert not held.changes
    assert held.held is not None
    assert "ended FAIL (latency: p95 1200 ms against p95 800 ms)" in held.held
    assert "the running version serves on, untouched" in held.held


def test_an_earlier_runs_verdict_is_not_this_candidates() -> None:
    """The record names another run (an earlier candidate's): this one is still to measure."""
    old = _desired("  env: {X: 1}\n")
    stale = _qualified(_desired("  env: {X: 2}\n"), RunOutcome(run_id="vlm-q-other",
                                                                result="PASS"))
    assert [a.verb for a in plan(stale, _container(old), _record(old), INSTANCE).actions] \
        == ["qualify"]


def test_a_change_that_is_not_a_candidate_is_replaced_at_once() -> None:
    old = _desired("  env: {X: 1}\n")
    new = _qualified(_desired("  env: {X: 1}\n  stopGraceSeconds: 5\n"))
    result = plan(new, _container(old), _record(old), INSTANCE)
    assert [a.verb for a in result.actions] == ["recreate"]
    assert not result.promoting


def test_a_stopped_service_is_not_compared_but_a_rejected_candidate_stays_out() -> None:
    old = _desired("  env: {X: 1}\n")
    new = _qualified(_desired("  env: {X: 2}\n"))
    result = plan(new, _container(old, status="exited", exit_code=1), _record(old), INSTANCE)
    assert [a.verb for a in result.actions] == ["recreate"]
    assert "nothing serves to compare the candidate with" in result.actions[0].cause
    rejected = _qualified(new, RunOutcome(run_id=RUN, result="INCONCLUSIVE", reason="why"))
    held = plan(rejected, _container(old, status="exited", exit_code=1), _record(old), INSTANCE)
    assert held.actions == []
    assert held.held is not None


def test_what_is_a_candidate() -> None:
    applied = {"image": "a", "model": {"preset": "p"}, "env": {}, "stopGraceSeconds": 30}
    assert not qualifies(applied, {**applied, "stopGraceSeconds": 5}, image_moved=False)
    assert qualifies(applied, {**applied, "image": "b"}, image_moved=False)
    assert qualifies(applied, {**applied, "model": {"preset": "q"}}, image_moved=False)
    assert qualifies(applied, {**applied, "env": {"X": "1"}}, image_moved=False)
    assert qualifies(applied, dict(applied), image_moved=True)  # a tag that moved
    assert qualifies(None, applied, image_moved=False)  # never replaced blind


def _baking(old: Desired, new: Desired, until: str = "2999-01-01T00:00:00.000Z"
            ) -> ResourceStatus:
    record = _record(new)
    known = DeploymentStatusFacts.of(record)
    known.promotion = PromotionFacts(phase="Baking", candidate=new.spec_hash, run=RUN,
                                     promoted_from="img (spec 0123)", bake_until=until,
                                     previous_spec=old.deployment.spec.model_dump(mode="json"))
    known.put(record)
    return record


def test_a_promoted_container_that_dies_during_its_bake_is_rolled_back() -> None:
    old = _desired("  env: {X: 1}\n")
    new = _qualified(_desired("  env: {X: 2}\n"), RunOutcome(run_id=RUN, result="PASS"))
    died = _container(new, status="exited", exit_code=3)
    result = plan(new, died, _baking(old, new), INSTANCE)
    assert [a.verb for a in result.actions] == ["rollback"]
    assert result.rolling_back is result.actions[0]
    assert result.actions[0].cause == ("the promoted candidate failed its bake: container "
                                       "exited with code 3; back to img (spec 0123)")
    watched = promotion.baking(_baking(old, new, until="2000-01-01T00:00:00.000Z"),
                               new.spec_hash)
    assert watched is not None
    assert promotion.bake_left_s(watched) == 0  # over: the next pass says it is Promoted
    # Without a bake a container that exits is only recreated.
    plain = plan(new, died, _record(new), INSTANCE)
    assert [a.verb for a in plain.actions] == ["recreate"]


def test_a_rolled_back_candidate_is_held_out() -> None:
    old = _desired("  env: {X: 1}\n")
    new = _desired("  env: {X: 2}\n")
    back = dataclasses.replace(new, qualification=Qualification(
        EXPERIMENT, RUN, RunOutcome(run_id=RUN, result="PASS"), "port 18100, no GPU", "gates",
        rolled_back="the promoted candidate failed its bake: container exited with code 3"))
    result = plan(back, _container(old), _record(old), INSTANCE)
    assert result.actions == []
    assert result.held is not None
    assert "promoted and rolled back: the promoted candidate failed its bake" in result.held
    # The version it rolled back to stops later: the candidate still stays out.
    stopped = plan(back, _container(old, status="exited", exit_code=1), _record(old), INSTANCE)
    assert stopped.actions == []
    assert stopped.held is not None


def test_each_promotion_is_kept_as_the_accepted_run_of_its_version() -> None:
    """A ``baseline: lastAccepted`` reads the running version's numbers from the run that
    promoted it: the record keeps that run per version (the latest eight), so a version rolled
    back to still has its own."""
    old, new = _desired("  env: {X: 1}\n"), _desired("  env: {X: 2}\n")
    record = _record(old)
    for i in range(10):
        found = Qualification(EXPERIMENT, f"{RUN}-{i}", RunOutcome(), "room", "gates")
        promotion.promoted(record, f"{i:064x}", found, "img", None, None, 0)
    promotion.promoted(record, new.spec_hash, Qualification(
        EXPERIMENT, RUN, RunOutcome(), "room", "gates"), "img", None, None, 0)
    accepted = DeploymentStatusFacts.of(record).accepted or {}
    assert len(accepted) == 8
    assert list(accepted.items())[-1] == (new.spec_hash, RUN)
    assert f"{9:064x}" in accepted
    assert f"{2:064x}" not in accepted  # the oldest went first


def test_a_candidate_committed_again_is_judged_by_the_run_it_had(tmp_path: Path) -> None:
    """The Experiment's record holds its latest run only: a revert to a candidate measured
    before reads that run's verdict from its bundle, and is never run twice."""
    store = Store(tmp_path / "state")
    root = tmp_path / "state" / "evidence"
    assert promotion.judged_before(store, root, RUN) is None  # never ran
    bundle = Evidence.create(root, RUN)
    bundle.status("Running", "Running")
    assert promotion.judged_before(store, root, RUN) is None  # no verdict yet
    bundle.status("Done", "Done", "FAIL", "latency: p95 2049 ms against p95 204 ms")
    found = promotion.judged_before(store, root, RUN)
    assert found is not None
    assert (found.run_id, found.result, found.evidence) == (RUN, "FAIL", str(bundle.folder))
    assert "2049 ms" in (found.reason or "")
    # Not in the evidence root (another replica ran it): the copy unpacked from the store
    # once is read where it was unpacked.
    elsewhere = tmp_path / "other-root"
    copy = Evidence.create(tmp_path / "state" / promotion.BUNDLE_COPIES, RUN)
    copy.status("Done", "Done", "PASS", "every gate passed")
    again = promotion.judged_before(store, elsewhere, RUN)
    assert again is not None
    assert (again.result, again.evidence) == ("PASS", str(copy.folder))
