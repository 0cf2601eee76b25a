"""The promotion judge's latency gate (``controllers.kinds.experiments.promotion.judge``): a real
difference beyond the allowance rejects, noise alone neither rejects nor promotes."""

from __future__ import annotations

import json
import math
import random

import pytest

from controllers.kinds.experiments.promotion.judge import (
    MIN_SAMPLES,
    judge_latency,
    mann_whitney_greater,
    p95,
)


def _latencies(seed: int, n: int, scale: float = 1.0, spread: float = 0.3) -> list[float]:
    """Per-chunk latencies (ms) as a service gives them: log-normal around 400 ms."""
    rng = random.Random(seed)
    return [scale * 400 * math.exp(rng.gauss(0, spread)) for _ in range(n)]


def test_the_test_agrees_with_its_textbook_value() -> None:
    # n1 = n2 = 5, no ties, every candidate above every baseline: U = 25, and the normal
    # approximation with continuity correction gives z = 12 / sqrt(25 * 11 / 12).
    test = mann_whitney_greater([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])
    assert test.u == 25
    assert test.z == pytest.approx(2.50672, abs=1e-5)
    assert test.p_value == pytest.approx(0.0060926, abs=1e-6)
    assert mann_whitney_greater([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]).p_value > 0.99
    # Ties share their rank, and the variance shrinks by the tie term.
    tied = mann_whitney_greater([2, 2, 3, 3], [1, 2, 2, 3])
    assert tied.u == 11  # ranks 4, 4, 7.5, 7.5 of 8 values, less 4 * 5 / 2
    assert mann_whitney_greater([5, 5], [5, 5]).p_value == 1.0  # one value: no evidence
    with pytest.raises(ValueError, match="a sample on each side"):
        mann_whitney_greater([], [1.0])


def test_p95_is_the_canarys_nearest_rank_a_latency_that_was_measured() -> None:
    assert p95([float(v) for v in range(1, 101)]) == 95.0
    assert p95([7.0]) == 7.0
    with pytest.raises(ValueError, match="no values"):
        p95([])


def test_a_candidate_like_its_baseline_passes() -> None:
    judged = judge_latency(_latencies(1, 300), _latencies(2, 300), max_regression=0.10)
    assert judged.verdict == "pass", judged.reason
    assert judged.effect is not None
    assert abs(judged.effect) < 0.10


def test_a_candidate_20_percent_slower_is_a_regression_naming_both_numbers() -> None:
    judged = judge_latency(_latencies(3, 300, scale=1.2), _latencies(4, 300),
                           max_regression=0.10)
    assert judged.verdict == "regression", judged.reason
    assert judged.test is not None
    assert judged.test.p_value < 0.05
    assert judged.candidate_p95_ms is not None
    assert judged.baseline_p95_ms is not None
    assert f"p95 {judged.candidate_p95_ms:.0f} ms against {judged.baseline_p95_ms:.0f} ms" in (
        judged.reason)
    record = judged.record()
    assert record["test"]["name"].startswith("Mann-Whitney U")
    json.dumps(record)  # the bundle holds it as JSON


def test_noise_alone_neither_rejects_nor_promotes() -> None:
    # 25 chunks a side: the p95 is about the second-slowest chunk. Two slow chunks more put
    # it 40 % over, and the other 23 are the baseline's own: chance explains that.
    base = _latencies(6, 25, spread=0.9)
    ordered = sorted(base)
    judged = judge_latency(ordered[:-2] + [v * 1.4 for v in ordered[-2:]], base,
                           max_regression=0.10)
    assert judged.effect is not None
    assert judged.effect > 0.10
    assert judged.verdict == "inconclusive", judged.reason
    assert "chance could explain it" in judged.reason
    few = judge_latency(_latencies(7, MIN_SAMPLES - 1), _latencies(8, 300), 0.10)
    assert few.verdict == "inconclusive"
    assert f"at least {MIN_SAMPLES} on each side" in few.reason


def test_a_slower_bulk_under_a_p95_within_the_gate_is_not_promoted() -> None:
    # Every chunk at the baseline's p95: the p95s agree, and the p95 alone would wave it
    # through, yet nine chunks in ten are slower than the gate allows.
    base = _latencies(9, 400, spread=0.5)
    judged = judge_latency([p95(base)] * 400, base, max_regression=0.10)
    assert judged.effect == pytest.approx(0.0)
    assert judged.verdict == "inconclusive", judged.reason
    assert "bulk" in judged.reason
