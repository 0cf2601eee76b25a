"""A Deployment that holds out a candidate (qualifying, rejected, rolled back) serves on, on
purpose, for as long as it takes: what uses it (a StreamSet) goes on against the version that
serves, instead of waiting for the Deployment to converge to a spec it may never run."""

from __future__ import annotations

import threading
from pathlib import Path

from controllers.contract import PassContext
from controllers.kinds.deployment.facts import DeploymentStatusFacts, PromotionFacts
from controllers.services import Services
from specs.declarations import STREAMSET
from specs.validate import parse_text, spec_hash
from state.keys import Key
from state.models import Owner, ResourceStatus
from state.store import Store
from tests.specs.cases import HEADER, body

STREAMSET_DOC = """---
apiVersion: rtvi.reconciler/v1
kind: StreamSet
metadata: {name: cams}
spec:
  deployment: vlm
  sources: [{name: red, synthetic: {colour: RED}}]
"""


def test_a_held_candidate_does_not_stop_what_uses_the_service(tmp_path: Path) -> None:
    spec_set = parse_text(HEADER + body(extra="  env: {X: '2'}\n") + STREAMSET_DOC, "s.yaml")
    (dep,) = spec_set.deployments
    (cams,) = [r for r in spec_set.resources if r.kind == "StreamSet"]
    store = Store(tmp_path / "state")
    ctx = PassContext(None, spec_set, threading.Event(),
                      Services(store, Owner("default", "0" * 32), lambda *_: None))
    record = ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm",
                            observed_generation="0" * 64)  # the running version's
    record.set_condition("Ready", "True", "PromotionRejected", "serving the running version")
    store.save(record)
    assert ctx.waiting_for(STREAMSET, cams) == (
        Key("Deployment", "vlm"), "waiting for Deployment/vlm to converge to its current spec")
    for phase, waits in (("Rejected", False), ("Qualifying", False), ("RolledBack", False),
                         ("Baking", True)):
        known = DeploymentStatusFacts.of(record)
        known.promotion = PromotionFacts(phase=phase, candidate=spec_hash(dep), run="vlm-q-1")
        known.put(record)
        store.save(record)
        assert (ctx.waiting_for(STREAMSET, cams) is not None) is waits, phase
    # Another candidate than the spec asks for now: the Deployment has yet to act on it.
    known.promotion = PromotionFacts(phase="Rejected", candidate="f" * 64, run="vlm-q-0")
    known.put(record)
    store.save(record)
    assert ctx.waiting_for(STREAMSET, cams) is not None
