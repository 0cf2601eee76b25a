"""``spec.promotion``: what it accepts, what it refuses (where, and why), and the qualification
run it makes, whose run ID names the candidate so one candidate is qualified once."""

from __future__ import annotations

import pytest

from specs.errors import SpecError
from specs.experiment import Experiment, qualification_name
from specs.experiments.promotion import PromotionExperimentSpec
from specs.validate import SpecSet, parse_text, spec_hash
from tests.specs.cases import HEADER, body

ROOM = "  promotion:\n    candidate: {port: 18100}\n"
CAPACITY = ("  promotion:\n    candidate: {port: 18100}\n    budgetSeconds: 400\n"
            "    gates:\n      maxCapacityLoss: 1\n      capacity: {initialStreamCount: 2, "
            "maxStreamCount: 4, windowSeconds: 10, maxP95LatencyMs: 900}\n")


def _set(extra: str = ROOM, image: str | None = None) -> SpecSet:
    text = HEADER + (body(extra=extra) if image is None else body(image=image, extra=extra))
    return parse_text(text, "specs/x.yaml")


def _made(spec_set: SpecSet) -> Experiment:
    found = spec_set.get("Experiment", qualification_name("vlm"))
    assert isinstance(found, Experiment), [r.metadata.name for r in spec_set.resources]
    return found


def _refused(extra: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        _set(extra)
    return [f"{i.location.line}:{i.field}: {i.message}" for i in caught.value.issues]


def test_a_deployment_with_promotion_makes_its_qualification_run() -> None:
    spec_set = _set()
    made = _made(spec_set)
    dep = spec_set.deployments[0]
    assert made.spec.type == "promotion"
    assert made.spec.template == "vlm"
    assert made.spec.service.hostPort == 18100
    assert made.spec.promotion.candidate == spec_hash(dep)
    assert made.spec.promotion.baseline.host == 18000  # the running service: measured in place
    assert made.spec.promotion.baselineFrom == "sideBySide"
    later = _made(_set(ROOM + "    baseline: lastAccepted\n"))
    assert isinstance(later.spec, PromotionExperimentSpec)
    assert later.spec.promotion.baselineFrom == "lastAccepted"
    assert made.spec.runId.startswith("vlm-q-")
    assert made.metadata.name == "vlm-promotion"
    assert spec_set.source_file(made) == "specs/x.yaml"  # said in its Deployment's file
    # Without spec.promotion, nothing is made.
    assert _set(extra="").get("Experiment", "vlm-promotion") is None


def test_the_run_id_names_the_candidate_and_the_gates_not_the_rest() -> None:
    """A new image is a new candidate (a new run); a readiness budget is not; new gates are a
    new qualification (a run never changes once launched)."""
    first = _made(_set()).spec.runId
    other = "rtvi-emulator@sha256:" + "c" * 64
    assert _made(_set(image=other)).spec.runId != first
    assert _made(_set(ROOM + "  readiness: {timeoutSeconds: 99}\n")).spec.runId == first
    stricter = ROOM + "    gates: {maxP95Regression: 5%}\n"
    assert _made(_set(stricter)).spec.runId != first


def test_the_promotion_block_is_not_part_of_the_deployments_hash() -> None:
    """Declaring or tuning the gates changes how a change is let in, not what runs: the
    running container is not recreated for it."""
    assert spec_hash(_set().deployments[0]) == spec_hash(_set(extra="").deployments[0])


@pytest.mark.parametrize(("extra", "expected"), [
    ("  promotion:\n    candidate: {port: 18000}\n",
     "spec.promotion.candidate.port: port 18000 is the running service's own"),
    ("  gpus: [0]\n  promotion:\n    candidate: {port: 18100, gpus: [0]}\n",
     "spec.promotion.candidate.gpus.0: GPU 0 is the running service's"),
    ("  promotion:\n    candidate: {port: 18100}\n    gates: {maxP95Regression: 10}\n",
     "spec.promotion.gates.maxP95Regression:"),
    ("  promotion:\n    candidate: {port: 18100}\n    budgetSeconds: 150\n"
     "    cleanupSeconds: 120\n", "spec.promotion.budgetSeconds: 150s cannot hold"),
    ("  promotion:\n    candidate: {port: 18100}\n    inPlace: true\n",
     "spec.promotion.inPlace: unknown field"),
    ("  promotion:\n    candidate: {port: 18100}\n    gates: {maxCapacityLoss: 1}\n",
     "spec.promotion.gates.maxCapacityLoss: capacity is judged only by a capacity search"),
    (CAPACITY.replace("initialStreamCount: 2", "initialStreamCount: 9"),
     "spec.promotion.gates.capacity.initialStreamCount: 9 is above maxStreamCount 4"),
    (CAPACITY.replace("windowSeconds: 10", "windowSeconds: 5, chunkDurationSeconds: 6"),
     "spec.promotion.gates.capacity.chunkDurationSeconds: a chunk of 6s is longer than"),
    (CAPACITY.replace("budgetSeconds: 400", "budgetSeconds: 190"),
     "spec.promotion.budgetSeconds: 190s cannot hold the 120s kept for cleanup plus a "
     "qualification of at least 80s (a capacity window on each side included)"),
])
def test_a_bad_promotion_is_refused_at_its_field(extra: str, expected: str) -> None:
    found = _refused(extra)
    assert any(expected in line for line in found), found


def test_a_capacity_gate_is_carried_into_the_run_and_names_its_new_qualification() -> None:
    made = _made(_set(CAPACITY))
    assert isinstance(made.spec, PromotionExperimentSpec)
    cap = made.spec.promotion.gates.capacity
    assert cap is not None
    assert (cap.initialStreamCount, cap.maxStreamCount, cap.windowSeconds) == (2, 4, 10)
    assert made.spec.promotion.gates.maxCapacityLoss == 1
    plain = _set(CAPACITY.replace("      maxCapacityLoss: 1\n", "").replace(
        "      capacity: {initialStreamCount: 2, maxStreamCount: 4, windowSeconds: 10, "
        "maxP95LatencyMs: 900}\n", "      maxP95Regression: 10%\n"))
    assert _made(plain).spec.runId != made.spec.runId


def test_a_rule_the_made_run_breaks_is_said_at_spec_promotion() -> None:
    """Its load cannot fit its budget: the made Experiment's own rule, said in the Deployment's
    file at the field that made it, naming what breaks."""
    found = _refused("  promotion:\n    candidate: {port: 18100}\n    budgetSeconds: 200\n"
                     "    cleanupSeconds: 100\n    gates:\n      canary: {performanceSeconds: 60,"
                     " repetitions: 3}\n")
    assert any("spec.promotion: the Experiment it makes (Experiment/vlm-promotion) breaks a "
               "rule at promotion.canary.performanceSeconds" in line for line in found), found


def test_a_host_network_service_names_the_candidates_port_variables() -> None:
    extra = ("  network: host\n  promotion:\n    candidate: {port: 18100}\n")
    text = HEADER + body(extra=extra).replace("port: {host: 18000}",
                                              "port: {host: 18000, container: 18000}")
    with pytest.raises(SpecError) as caught:
        parse_text(text, "specs/x.yaml")
    assert any(i.field == "spec.promotion.candidate.env" for i in caught.value.issues), \
        caught.value.issues
    fixed = text.replace("candidate: {port: 18100}",
                         "candidate: {port: 18100, env: {RTVI_EMU_PORT: '18100'}}")
    made = _made(parse_text(fixed, "specs/x.yaml"))
    assert made.spec.service.env == {"RTVI_EMU_PORT": "18100"}


def test_a_promotion_run_cannot_be_written_by_hand() -> None:
    written = """---
apiVersion: rtvi.reconciler/v1
kind: Experiment
metadata: {name: sneaky}
spec:
  type: promotion
  runId: sneaky-1
  template: vlm
  service: {hostPort: 18200}
  measurement: {claim: mine}
  promotion:
    deployment: vlm
    candidate: """ + "a" * 64 + """
    baseline: {host: 18000}
    canary: {streams: 2}
"""
    with pytest.raises(SpecError) as caught:
        parse_text(HEADER + body() + written, "specs/x.yaml")
    assert any("is made by its Deployment's spec.promotion, never written" in i.message
               for i in caught.value.issues), caught.value.issues
