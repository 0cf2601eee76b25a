"""``reconciler promote``: what a person asks of a Deployment is judged by its kind's facts,
kept in its record, and read by its next pass as an approval or the next attempt's run ID."""

from __future__ import annotations

from pathlib import Path

import pytest

from controllers.facts import RunOutcome
from controllers.kinds.deployment.facts import DeploymentStatusFacts, PromotionFacts
from controllers.kinds.deployment.promotion import next_attempt, qualification
from reconciler.control import RequestRefused, ask
from specs.experiment import Experiment
from specs.experiments.promotion import PromotionExperimentSpec
from specs.validate import parse_text
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store
from tests.specs.cases import HEADER, body

DEP = Key("Deployment", "vlm")
QUAL = Key("Experiment", "vlm-promotion")


def _held(store: Store, run: str, phase: str = "Rejected") -> None:
    def mutate(st: ResourceStatus) -> None:
        known = DeploymentStatusFacts.of(st)
        known.promotion = PromotionFacts(phase=phase, candidate="c" * 64, run=run,
                                         reason="FAIL: latency")
        known.put(st)
    store.update(DEP, mutate)


def test_a_request_is_judged_by_the_kind_and_kept_in_the_record(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    with pytest.raises(RequestRefused, match="has no record"):
        ask(store, DEP, "approve", "vlm-q-1")
    _held(store, "vlm-q-1", phase="Qualifying")
    with pytest.raises(RequestRefused, match="nothing is held out to approve: its candidate is "
                                             "qualifying"):
        ask(store, DEP, "approve", "vlm-q-1")
    _held(store, "vlm-q-1")
    with pytest.raises(RequestRefused, match="run vlm-q-0 is not the held candidate's: that is "
                                             "vlm-q-1"):
        ask(store, DEP, "approve", "vlm-q-0")
    with pytest.raises(RequestRefused, match="takes approve or rerun, not bake"):
        ask(store, DEP, "bake", "")
    assert "approve vlm-q-1 recorded" in ask(store, DEP, "approve", "vlm-q-1")
    record = store.load(DEP)
    assert record is not None
    assert record.requests == {"approve": "vlm-q-1"}
    store.update(Key("Host", "local"), lambda st: None)
    with pytest.raises(RequestRefused, match="it takes no rerun request"):
        ask(store, Key("Host", "local"), "rerun", "")


def test_attempts_count_up_to_the_run_ids_room() -> None:
    base = "vlm-q-" + "a" * 16
    assert next_attempt(base, base) == base + "-r1"
    assert next_attempt(base + "-r1", base) == base + "-r2"
    assert next_attempt(base + "-r99", base) is None
    assert len(base[:36] + "-q-" + "a" * 16 + "-r99") <= 63


def test_the_next_pass_reads_a_rerun_and_an_approval(tmp_path: Path) -> None:
    spec_set = parse_text(HEADER + body(extra="  promotion:\n    candidate: {port: 18100}\n"))
    dep = spec_set.deployments[0]
    made = spec_set.get("Experiment", "vlm-promotion")
    assert isinstance(made, Experiment)
    assert isinstance(made.spec, PromotionExperimentSpec)
    candidate = made.spec.promotion.candidate
    base = made.spec.runId
    store = Store(tmp_path / "state")

    def run(result: str) -> None:
        def mutate(st: ResourceStatus) -> None:
            RunOutcome(run_id=base, result=result, reason="why").put(st)
        store.update(QUAL, mutate)

    def asked(requests: dict[str, str]) -> None:
        def mutate(st: ResourceStatus) -> None:
            known = DeploymentStatusFacts.of(st)
            known.promotion = PromotionFacts(phase="Rejected", candidate=candidate, run=base)
            known.put(st)
            st.requests = requests
        store.update(DEP, mutate)

    run("FAIL")
    asked({})
    found = qualification(dep, spec_set, store)
    assert found is not None
    assert (found.run_id, found.result, found.approved) == (base, "FAIL", False)
    asked({"approve": base})
    found = qualification(dep, spec_set, store)
    assert found is not None
    assert found.approved
    asked({"rerun": ""})
    found = qualification(dep, spec_set, store)
    assert found is not None
    assert (found.run_id, found.result) == (base + "-r1", None)  # to measure again
    run("PASS")  # a passed candidate is never rerun nor approved: it is promoted
    asked({"rerun": "", "approve": base})
    found = qualification(dep, spec_set, store)
    assert found is not None
    assert (found.run_id, found.result, found.approved) == (base, "PASS", False)
