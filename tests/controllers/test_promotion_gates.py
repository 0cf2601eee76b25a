"""A candidate against its baseline gate by gate (``controllers.kinds.experiments.promotion
.gates``): the four candidates issue 39 names (slower, fewer streams, a GPU-memory leak,
swapped answers) are each rejected with the right gate and both numbers; an equal one is
promoted; what cannot be judged fails closed."""

from __future__ import annotations

import json
import math
import random

import pytest

from controllers.kinds.experiments.promotion.gates import Gates, Measured, decide

GATES = Gates(max_p95_regression=0.10, max_capacity_loss=0, max_gpu_memory_growth_mib=512)


def _chunks(seed: int, scale: float = 1.0) -> list[float]:
    rng = random.Random(seed)
    return [scale * 400 * math.exp(rng.gauss(0, 0.3)) for _ in range(300)]


def _side(seed: int, scale: float = 1.0, **overrides: object) -> Measured:
    values: dict[str, object] = {"chunk_latencies_ms": _chunks(seed, scale), "capacity": 8,
                                 "dropped_chunks": 0, "isolated": True,
                                 "gpu_growth_mib": 0.0}
    values.update(overrides)
    return Measured(**values)  # type: ignore[arg-type]


BASELINE = _side(100)


def test_a_candidate_that_measures_up_is_promoted_with_every_gate_shown() -> None:
    decision = decide(_side(1), BASELINE, GATES)
    assert decision.verdict == "promote", decision.record()
    assert [g.gate for g in decision.gates] == [
        "latency", "capacity", "dropped chunks", "isolation", "GPU memory"]
    assert decision.reason() == ""
    assert "| capacity | 8 streams | 8 streams | at most 0 fewer streams | pass |" in (
        decision.table())
    json.dumps(decision.record())


@pytest.mark.parametrize(("candidate", "gate", "said"), [
    (_side(2, scale=1.2), "latency", "slower than allowed, beyond noise"),
    (_side(3, capacity=6), "capacity", "capacity: 6 streams against 8 streams (at most 0 "
                                       "fewer streams): 2 fewer"),
    (_side(4, gpu_growth_mib=2048.0), "GPU memory", "GPU memory: 2048 MiB against 0 MiB "
                                                    "(at most 512 MiB left after cleanup)"),
    (_side(5, isolated=False), "isolation", "isolation: broken against held"),
    (_side(6, dropped_chunks=3), "dropped chunks", "dropped chunks: 3 against 0"),
])
def test_each_worse_candidate_is_rejected_naming_its_gate_and_both_numbers(
        candidate: Measured, gate: str, said: str) -> None:
    decision = decide(candidate, BASELINE, GATES)
    assert decision.verdict == "reject", decision.record()
    assert [g.gate for g in decision.gates if g.verdict == "fail"] == [gate]
    assert said in decision.reason()


def test_a_model_change_is_judged_on_its_accuracy_too() -> None:
    base = _side(100, accuracy=0.95)
    assert decide(_side(7, accuracy=0.95), base, GATES).verdict == "promote"
    worse = decide(_side(8, accuracy=0.80), base, GATES)
    assert worse.verdict == "reject"
    assert "accuracy: 80% against 95% (at most 0% lower)" in worse.reason()


def test_what_cannot_be_judged_fails_closed_and_says_so() -> None:
    # Capacity measured on the baseline only: no evidence about the candidate's.
    decision = decide(_side(9, capacity=None), BASELINE, GATES)
    assert decision.verdict == "inconclusive"
    assert "capacity: not measured against 8 streams" in decision.reason()
    assert "measured on one side only" in decision.reason()
    # A failed gate outweighs an inconclusive one: the reason is the failure.
    both = decide(_side(10, capacity=None, isolated=False), BASELINE, GATES)
    assert both.verdict == "reject"
    assert both.reason().startswith("isolation:")
    # Nothing measured at all is no qualification, and it says where to look.
    nothing = decide(Measured(), Measured(), GATES)
    assert nothing.verdict == "inconclusive"
    assert nothing.reason().startswith("no gate was measured on either side")
    # A gate neither side measured is not one of this qualification.
    assert "accuracy" not in [g.gate for g in decide(_side(11), BASELINE, GATES).gates]
