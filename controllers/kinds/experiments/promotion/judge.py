"""Is a candidate's latency worse than its baseline's, beyond noise? (issue 39's judge)

A promotion compares a candidate service with the one it would replace, measured side by side
in the same window. Two p95s from two runs differ every time, so a gate on their ratio alone
rejects good candidates on a noisy day and lets bad ones through on a quiet one. Kayenta's
judge (and this one) asks two questions of the per-chunk latencies of both sides:

  - **Is it big enough to matter?** The effect: the candidate's p95 over the baseline's, less
    one (``+0.20`` is 20 % slower), against the gate's ``maxP95Regression``.
  - **Is it real?** The Mann-Whitney U test, one-sided, of the candidate's latencies divided
    by ``1 + maxP95Regression`` against the baseline's: is the candidate slower than the gate
    allows, beyond what chance gives two samples of one service? It ranks both samples
    together, so it needs no assumption about the latency's distribution (skewed and
    long-tailed). With a window's samples (tens to thousands of chunks) the normal
    approximation, with the tie and continuity corrections, is what
    ``scipy.stats.mannwhitneyu(..., alternative="greater", method="asymptotic")`` computes.

Noise alone neither promotes nor rejects:
  - **regression**: the effect is over the gate and the test says it is real;
  - **pass**: the effect is within the gate and the test finds nothing beyond it;
  - **inconclusive** otherwise: an effect over the gate that chance could explain, a p95
    within it while the bulk is slower than it allows, or too few chunks on either side. The
    candidate is not promoted on it, and it is not called slower either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from controllers.kinds.experiments.ledger import percentile

ALPHA = 0.05
MIN_SAMPLES = 20  # per side: below it the normal approximation is no judge of anything
Verdict = Literal["pass", "regression", "inconclusive"]


@dataclass(frozen=True)
class MannWhitney:
    """The one-sided test that ``candidate`` is greater than ``baseline``."""

    u: float  # pairs (candidate, baseline) in which the candidate is slower; a tie counts half
    z: float
    p_value: float


@dataclass(frozen=True)
class LatencyJudgement:
    verdict: Verdict
    reason: str
    candidate_p95_ms: float | None
    baseline_p95_ms: float | None
    effect: float | None  # candidate p95 / baseline p95 - 1
    test: MannWhitney | None
    samples: tuple[int, int]  # (candidate, baseline)

    def record(self) -> dict[str, Any]:
        """For the promotion bundle: every number the verdict was made of."""
        return {**asdict(self), "test": None if self.test is None else {
            "name": "Mann-Whitney U, one-sided (candidate greater), normal approximation with "
                    "tie and continuity corrections", **asdict(self.test)}}


def _ranks(values: Sequence[float]) -> tuple[list[float], float]:
    """Ranks from 1 (ties share their average rank), and the tie term sum(t^3 - t)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    return ranks, ties


def mann_whitney_greater(candidate: Sequence[float], baseline: Sequence[float]) -> MannWhitney:
    """The one-sided Mann-Whitney U test that ``candidate`` tends to be greater."""
    n1, n2 = len(candidate), len(baseline)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs a sample on each side")
    ranks, ties = _ranks([*candidate, *baseline])
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    n = n1 + n2
    mean = n1 * n2 / 2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:  # every value the same: no evidence either way
        return MannWhitney(u, 0.0, 1.0)
    z = (u - mean - 0.5) / math.sqrt(variance)
    return MannWhitney(u, z, 0.5 * math.erfc(z / math.sqrt(2)))


def p95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile, as the canary reports it (``ledger.percentile``:
    every latency reported is one that was measured)."""
    found = percentile(values, 95)
    if found is None:
        raise ValueError("no values")
    return found


def judge_latency(candidate_ms: Sequence[float], baseline_ms: Sequence[float],
                  max_regression: float, alpha: float = ALPHA) -> LatencyJudgement:
    """Whether the candidate's per-chunk latencies regress beyond ``max_regression`` (0.10:
    a p95 10 % above the baseline's) and beyond noise (``alpha``)."""
    samples = (len(candidate_ms), len(baseline_ms))
    if min(samples) < MIN_SAMPLES:
        return LatencyJudgement(
            "inconclusive", f"{samples[0]} candidate and {samples[1]} baseline chunks: at "
            f"least {MIN_SAMPLES} on each side are needed to judge latency", None, None, None,
            None, samples)
    ours, theirs = p95(candidate_ms), p95(baseline_ms)
    effect = ours / theirs - 1 if theirs > 0 else (0.0 if ours <= 0 else math.inf)
    allowed = 1 + max_regression
    test = mann_whitney_greater([c / allowed for c in candidate_ms], baseline_ms)
    real = test.p_value < alpha
    numbers = (f"p95 {ours:.0f} ms against {theirs:.0f} ms ({effect:+.1%}; "
               f"{max_regression:.0%} allowed), Mann-Whitney p={test.p_value:.3g}")
    verdict: Verdict
    if effect > max_regression and real:
        verdict, why = "regression", "slower than allowed, beyond noise"
    elif effect <= max_regression and not real:
        verdict, why = "pass", "within what is allowed"
    elif effect > max_regression:
        verdict, why = "inconclusive", (f"over what is allowed, but chance could explain it "
                                        f"(p >= {alpha:g}): measure again")
    else:
        verdict, why = "inconclusive", ("the p95 is within what is allowed but the bulk of "
                                        "the chunks is slower than that, beyond noise")
    return LatencyJudgement(verdict, f"{numbers}: {why}", ours, theirs, effect, test, samples)
