"""The capacity search: the boundary within ±1 on several capacities, in no more windows than
the harness's ramp and bisection, BCD 3.3's halving with the original failure kept, and the
rules that stop it. Windows follow the RTVI emulator's latency law (a base plus a cost per
live stream, with jitter; unstable above the capacity K)."""

from __future__ import annotations

import random

import pytest

from controllers.kinds.experiments.capacity.search import (
    Outcome,
    SearchSpec,
    Verdict,
    Window,
    WindowRunner,
    harness_search,
    next_count,
    predicted_limit,
    search,
)

BASE_MS, PER_STREAM_MS = 200.0, 40.0


def emulator(k: int, seed: int = 0, jitter_ms: float = 10.0,
             flat: bool = False) -> tuple[WindowRunner, float, list[tuple[str, int]]]:
    """Windows of an emulator of capacity ``k``; the contract's maximum p95 sits between K and
    K+1 streams (or, ``flat``, latency does not grow and admission fails above K)."""
    rng = random.Random(seed)
    asked: list[tuple[str, int]] = []

    def run(attempt: str, n: int) -> Window:
        asked.append((attempt, n))
        p95 = BASE_MS + (0 if flat else PER_STREAM_MS * n) + rng.uniform(-jitter_ms, jitter_ms)
        return Window(n, Verdict.STABLE if n <= k else Verdict.UNSTABLE, p95,
                      "" if n <= k else "p95 over the maximum", attempt)
    return run, BASE_MS + PER_STREAM_MS * (k + 0.5), asked


@pytest.mark.parametrize("k", [5, 9, 14])
@pytest.mark.parametrize(("initial", "add"), [(1, 1), (4, 1), (8, 2)])
def test_the_boundary_is_found_within_one_stream_with_no_more_windows_than_the_harness(
        k: int, initial: int, add: int) -> None:
    for seed in range(3):
        run, max_p95, _ = emulator(k, seed)
        ours = search(run, "cap-1", SearchSpec(initial, add, 64, max_p95))
        assert (ours.highest_stable, ours.first_unstable, ours.found) == (k, k + 1, True)
        assert ours.ledger[0].streams == initial  # the harness's seed first
        harness_run, _, _ = emulator(k, seed)
        theirs = harness_search(harness_run, "cap-1", SearchSpec(initial, add, 64, max_p95))
        assert (theirs.highest_stable, theirs.first_unstable) == (k, k + 1)
        assert len(ours.ledger) <= len(theirs.ledger)


def test_far_boundaries_take_a_handful_of_windows_where_a_ramp_takes_dozens() -> None:
    run, max_p95, asked = emulator(100)
    ours = search(run, "cap-1", SearchSpec(4, 1, 512, max_p95))
    assert (ours.highest_stable, ours.first_unstable) == (100, 101)
    assert len(asked) <= 8
    harness_run, _, _ = emulator(100)
    assert len(harness_search(harness_run, "cap-1", SearchSpec(4, 1, 512, max_p95)).ledger) == 98


def test_a_failed_initial_window_is_halved_under_child_run_ids_and_kept() -> None:
    run, max_p95, asked = emulator(5)
    outcome = search(run, "cap-7", SearchSpec(24, 2, 64, max_p95))
    assert (outcome.highest_stable, outcome.first_unstable) == (5, 6)
    assert asked[:3] == [("cap-7", 24), ("cap-7.r1", 12), ("cap-7.r2", 6)]
    assert asked[3] == ("cap-7.r3", 3)  # 6 failed too: halved again, then the search goes on
    first = outcome.ledger[0]
    assert (first.attempt, first.streams, first.verdict) == ("cap-7", 24, Verdict.UNSTABLE)
    assert {w.attempt for w in outcome.ledger[4:]} == {"cap-7.r3"}


def test_one_stream_unstable_is_inconclusive_with_every_attempt_kept() -> None:
    run, max_p95, asked = emulator(0)
    outcome = search(run, "cap-1", SearchSpec(4, 1, 64, max_p95))
    assert outcome.highest_stable is None
    assert not outcome.found
    assert outcome.inconclusive.startswith("even 1 stream is unstable (")
    assert [n for _, n in asked] == [4, 2, 1]
    assert len(outcome.ledger) == 3


def test_an_inconclusive_window_stops_the_search_saying_why() -> None:
    def run(attempt: str, n: int) -> Window:
        if n > 6:
            return Window(n, Verdict.INCONCLUSIVE, None, "stream cam-3 failed", attempt)
        return Window(n, Verdict.STABLE, BASE_MS + PER_STREAM_MS * n, "", attempt)
    outcome = search(run, "cap-1", SearchSpec(4, 2, 64, 10_000.0))
    assert outcome.inconclusive.endswith("streams: stream cam-3 failed")
    assert not outcome.found
    assert outcome.ledger[-1].verdict is Verdict.INCONCLUSIVE
    theirs = harness_search(run, "cap-1", SearchSpec(4, 2, 64, 10_000.0))
    assert theirs.inconclusive == "8 streams: stream cam-3 failed"


def test_stable_at_the_most_the_spec_allows_reports_no_unstable_count() -> None:
    run, _, asked = emulator(1000)
    outcome = search(run, "cap-1", SearchSpec(4, 4, 20, 1e9))
    assert (outcome.highest_stable, outcome.first_unstable, outcome.found) == (20, None, False)
    assert max(n for _, n in asked) == 20


def test_an_admission_limit_with_flat_latency_is_found_by_growing_then_bisecting() -> None:
    run, _, _ = emulator(37, flat=True)
    outcome = search(run, "cap-1", SearchSpec(4, 2, 256, BASE_MS * 2))
    assert (outcome.highest_stable, outcome.first_unstable) == (37, 38)
    assert [w.streams for w in outcome.ledger][:6] == [4, 6, 10, 18, 34, 66]  # doubling steps
    harness_run, _, _ = emulator(37, flat=True)
    theirs = harness_search(harness_run, "cap-1", SearchSpec(4, 2, 256, BASE_MS * 2))
    assert (len(outcome.ledger), len(theirs.ledger)) == (11, 19)


# --- the pieces ---------------------------------------------------------------------------------

def _w(n: int, p95: float | None, verdict: Verdict = Verdict.STABLE) -> Window:
    return Window(n, verdict, p95, "")


def test_the_line_through_the_windows_predicts_the_limit() -> None:
    assert predicted_limit([_w(2, 280.0), _w(4, 360.0)], 500.0) == 7  # 200 + 40·n ≤ 500
    assert predicted_limit([_w(2, 280.0), _w(4, 360.0)], 520.0) == 8
    assert predicted_limit([_w(4, 360.0)], 500.0) is None  # one point
    assert predicted_limit([_w(4, 360.0), _w(4, 370.0)], 500.0) is None  # one N
    assert predicted_limit([_w(2, 360.0), _w(4, 280.0)], 500.0) is None  # falls
    assert predicted_limit([_w(2, 300.0), _w(4, 301.0)], 500.0) is None  # flat (under 5 %)
    assert predicted_limit([_w(2, 280.0), _w(4, None)], 500.0) is None  # not measured
    # An unstable window within the maximum: latency is not what fails, so no line.
    assert predicted_limit([_w(2, 280.0), _w(4, 360.0), _w(5, 400.0, Verdict.UNSTABLE)],
                           500.0) is None
    # Inconclusive windows are not evidence.
    assert predicted_limit([_w(2, 280.0), _w(4, 360.0),
                            _w(9, 100.0, Verdict.INCONCLUSIVE)], 500.0) == 7


def _outcome(lo: int | None, hi: int | None, *windows: Window) -> Outcome:
    return Outcome(lo, hi, list(windows))


def test_where_the_next_window_goes() -> None:
    spec = SearchSpec(4, 2, 100, 500.0)
    assert next_count(spec, _outcome(4, None, _w(4, None)), 0) == 6  # grow by add
    assert next_count(spec, _outcome(6, None, _w(6, None)), 2) == 14  # then 2·add, 4·add
    assert next_count(spec, _outcome(96, None, _w(96, None)), 3) == 100  # never past the max
    line = (_w(2, 280.0), _w(3, 320.0))  # limit at 7
    assert next_count(spec, _outcome(3, None, *line), 1) == 7
    assert next_count(spec, _outcome(2, None, _w(1, 240.0), _w(2, 280.0)), 1) == 6  # ≤ 2·lo+add
    assert next_count(spec, _outcome(7, None, *line), 1) == 8  # at the line: just above
    assert next_count(spec, _outcome(3, 20, *line), 0) == 7  # between: follow the line
    assert next_count(spec, _outcome(3, 6, *line), 0) == 4  # line past hi: midpoint
    assert next_count(spec, _outcome(8, 12, *line), 0) == 9  # line at or below lo: lo + 1
    assert next_count(spec, _outcome(4, 12, _w(4, None), _w(12, None, Verdict.UNSTABLE)),
                      0) == 8  # no line: bisect
