"""Who a finished run's verdict wakes: the template that waits on it (a promotion's
Deployment), not the template of every canary at each of its resyncs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controllers.kinds.experiments.facts import ExperimentStatusFacts
from controllers.kinds.experiments.kind import ExperimentDesired, ExperimentKind
from specs.experiment import Experiment
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store

SPECS: dict[str, dict[str, Any]] = {
    "canary": {"canary": {"streams": 2}},
    "promotion": {"promotion": {"deployment": "vlm", "candidate": "a" * 64,
                                "baseline": {"host": 18000}, "canary": {"streams": 2}}},
}


def _experiment(kind: str) -> Experiment:
    return Experiment.model_validate({
        "apiVersion": "rtvi.reconciler/v1", "kind": "Experiment", "metadata": {"name": kind},
        "spec": {"type": kind, "runId": f"{kind}-1", "template": "vlm",
                 "service": {"hostPort": 18100}, "measurement": {"claim": "c"}, **SPECS[kind]}})


def test_only_a_template_that_waits_on_the_verdict_is_woken(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    for kind, woken in (("canary", ()), ("promotion", (Key("Deployment", "vlm"),))):
        record = ResourceStatus(resource=f"Experiment/{kind}", kind="Experiment", name=kind)
        known = ExperimentStatusFacts.of(record)
        known.run_id, known.result, known.template = f"{kind}-1", "PASS", "vlm"
        known.put(record)
        desired = ExperimentDesired(_experiment(kind), record)
        result = ExperimentKind()._verdict(record.key, record, desired, store)
        assert result.wake == woken, kind
    # A recovery has no spec at hand: it wakes the template, as before.
    assert ExperimentKind()._verdict(record.key, record, None, store).wake == (
        Key("Deployment", "vlm"),)
