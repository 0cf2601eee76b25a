"""Benchmark: stability windows a capacity search spends, against the VSS harness's way.

Baseline (named, in the same run): ``harness`` — the harness's linear ramp from
``initialStreamCount`` by ``addStreamCount`` until a window fails, then bisection
(``controllers.kinds.experiments.capacity.search.harness_search``). Ours: ``search`` (latency-guided
growth and refinement). Both must report the same boundary within ±1.

Windows follow the RTVI emulator's laws, with its knobs' meaning: p95 chunk latency is
``RTVI_EMU_LATENCY_MS + RTVI_EMU_LATENCY_PER_STREAM_MS * live streams`` plus jitter, and the
contract's maximum p95 is crossed just above capacity K (``latency``); or latency stays flat
and admission fails above K (``admission``, ``RTVI_EMU_MAX_STREAMS``). A window is simulated
(the verdict the law gives), not run: a real window holds live streams for minutes, and what
is measured here is how many the search asks for. Seeds are the harness's (BCD 3.2: 144/4,
70/2, 32/1) and small ones.

Usage: .venv/bin/python bench/capacity.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controllers.kinds.experiments.capacity.search import (
    Outcome,
    SearchSpec,
    Verdict,
    Window,
    WindowRunner,
    harness_search,
    search,
)

LATENCY_MS, PER_STREAM_MS, JITTER_MS = 200.0, 40.0, 10.0
CAPACITIES = (5, 9, 14, 40, 100, 160)
STARTS = ((1, 1), (4, 1), (8, 2), (32, 1), (70, 2), (144, 4))
MAX_STREAMS = 512


def emulator(k: int, law: str, seed: int) -> tuple[WindowRunner, float]:
    rng = random.Random(seed)

    def run(attempt: str, n: int) -> Window:
        growth = 0.0 if law == "admission" else PER_STREAM_MS * n
        p95 = LATENCY_MS + growth + rng.uniform(-JITTER_MS, JITTER_MS)
        return Window(n, Verdict.STABLE if n <= k else Verdict.UNSTABLE, p95, "", attempt)
    max_p95 = LATENCY_MS * 2 if law == "admission" else LATENCY_MS + PER_STREAM_MS * (k + 0.5)
    return run, max_p95


def right(outcome: Outcome, k: int) -> bool:
    return (outcome.highest_stable, outcome.first_unstable) == ((k or None), k + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="jitter seeds per case")
    args = parser.parse_args()
    print(f"{'law':<10} {'K':>4} {'start/add':>9} {'harness windows':>15} {'ours':>6} "
          f"{'both ±1':>7}")
    totals: dict[str, list[int]] = {}
    for law in ("latency", "admission"):
        for k in CAPACITIES:
            for initial, add in STARTS:
                theirs, ours, ok = [], [], True
                for seed in range(args.seeds):
                    spec_run, max_p95 = emulator(k, law, seed)
                    spec = SearchSpec(initial, add, MAX_STREAMS, max_p95)
                    mine = search(spec_run, "bench", spec)
                    base_run, _ = emulator(k, law, seed)
                    base = harness_search(base_run, "bench", spec)
                    ok = ok and right(mine, k) and right(base, k)
                    ours.append(len(mine.ledger))
                    theirs.append(len(base.ledger))
                totals.setdefault(law, [0, 0])
                totals[law][0] += sum(theirs)
                totals[law][1] += sum(ours)
                print(f"{law:<10} {k:>4} {f'{initial}/{add}':>9} "
                      f"{sum(theirs) / len(theirs):>15.1f} {sum(ours) / len(ours):>6.1f} "
                      f"{'yes' if ok else 'NO':>7}")
    print()
    for law, (theirs_total, ours_total) in totals.items():
        print(f"{law}: {ours_total} windows against the harness's {theirs_total} "
              f"({ours_total / theirs_total:.0%})")


if __name__ == "__main__":
    main()
