"""A stand-in for the VSS benchmark harness (``perf/benchmark/rtvi_perf_benchmark.py``):
the same command line, and the report the reconciler reads. It really calls the service.

Command line (the harness's, as the perf-testing guide gives it):
  --config C --list-scenarios         print the config's scenario names, one per line
  --config C --scenario S [--initial-stream-count N] [--add-stream-count N]
      [--binary-search-refinement | --no-binary-search-refinement]
      [--concurrency-levels 1,2,4]

Config (YAML): ``output_dir`` and ``rtvi_url`` (the run sets both), and ``scenarios``: name ->
``{mode, repetitions, concurrency_levels, prompt, vlm_api_mode}`` plus stand-in behaviour:
``fail_at`` (a concurrency level whose requests fail, with ``failure`` as the text),
``quiet_seconds`` (sleep that long without a log line, as a long window does),
``bad_source_gate`` (a repetition whose source gate fails), ``report_failed`` (the summary's
``failed`` as given, whatever happened: a report that says PASS with a failure), ``exit_code``.

Report: ``<output_dir>/results.json``:
  {"scenario", "mode", "vlm_api_mode", "options": {...},
   "summary": {"overall_status": "PASS"|"FAIL", "passed", "failed", "prompt_tokens"},
   "repetitions": [{"index", "status", "prompt_tokens",
                    "source_gates": {"expected", "distinct", "fresh", "passed"}}],
   "concurrency_levels": [{"concurrency", "status", "p95_ms", "p99_ms", "error"}]}
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


def model_of(base: str) -> str:
    with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
        return str(json.loads(response.read())["data"][0]["id"])


def burst(base: str, model: str, prompt: str, n: int) -> tuple[list[float], int, str]:
    """``n`` chat requests at once: their latencies (ms), prompt tokens, and an error."""
    latencies: list[float] = []
    tokens = [0]
    errors: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        started = time.monotonic()
        try:
            answer = post(f"{base}/v1/chat/completions", {
                "model": model, "max_tokens": 8,
                "messages": [{"role": "user", "content": prompt}]})
        except OSError as exc:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            return
        with lock:
            latencies.append((time.monotonic() - started) * 1000)
            tokens[0] += int(answer.get("usage", {}).get("prompt_tokens", 0))
    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, tokens[0], errors[0] if errors else ""


def pct(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1], 3) if ordered else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--list-scenarios", action="store_true")
    parser.add_argument("--scenario")
    parser.add_argument("--initial-stream-count", type=int)
    parser.add_argument("--add-stream-count", type=int)
    parser.add_argument("--binary-search-refinement", dest="refine", action="store_true",
                        default=None)
    parser.add_argument("--no-binary-search-refinement", dest="refine", action="store_false")
    parser.add_argument("--concurrency-levels")
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    scenarios: dict[str, dict[str, Any]] = config.get("scenarios") or {}
    if args.list_scenarios:
        for name in scenarios:
            print(name)
        return 0
    if args.scenario not in scenarios:
        print(f"unknown scenario {args.scenario}", file=sys.stderr)
        return 2
    scenario = scenarios[args.scenario]
    base = str(config["rtvi_url"]).rstrip("/")
    out = Path(config["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    log(f"Scenario {args.scenario}: {scenario.get('mode')} against {base}")
    model = model_of(base)
    prompt = scenario.get("prompt", "Describe the scene in the video in one short sentence "
                          "naming every object colour and movement you can see now.")
    levels = ([int(n) for n in args.concurrency_levels.split(",")] if args.concurrency_levels
              else scenario.get("concurrency_levels") or [2])
    if scenario.get("quiet_seconds"):
        time.sleep(float(scenario["quiet_seconds"]))  # a long window: nothing to log
    repetitions, level_rows, total_tokens = [], [], 0
    for index in range(int(scenario.get("repetitions", 1))):
        rep_tokens = 0
        for level in levels:
            latencies, tokens, error = burst(base, model, prompt, level)
            if scenario.get("fail_at") == level:
                error = str(scenario.get("failure", "request failed"))
            rep_tokens += tokens
            level_rows.append({"concurrency": level, "status": "FAIL" if error else "PASS",
                               "p95_ms": pct(latencies, 95), "p99_ms": pct(latencies, 99),
                               "error": error or None})
            log(f"Stability check: {level} concurrent, p95 {pct(latencies, 95)} ms"
                + (f", FAILED: {error}" if error else ""))
        expected = max(levels)
        bad = scenario.get("bad_source_gate") and index == 0
        repetitions.append({"index": index, "status": "FAIL" if bad else "PASS",
                            "prompt_tokens": rep_tokens,
                            "source_gates": {"expected": expected,
                                             "distinct": expected - 1 if bad else expected,
                                             "fresh": expected, "passed": not bad}})
        total_tokens += rep_tokens
    failed = sum(r["status"] != "PASS" for r in repetitions) + sum(
        r["status"] != "PASS" for r in level_rows)
    result = {"scenario": args.scenario, "mode": scenario.get("mode"),
              "vlm_api_mode": scenario.get("vlm_api_mode", "generate_captions"),
              "options": {"initial_stream_count": args.initial_stream_count,
                          "add_stream_count": args.add_stream_count,
                          "binary_search_refinement": args.refine, "levels": levels},
              "summary": {"overall_status": "FAIL" if failed else "PASS",
                          "passed": len(repetitions) + len(level_rows) - failed,
                          "failed": scenario.get("report_failed", failed),
                          "prompt_tokens": total_tokens},
              "repetitions": repetitions, "concurrency_levels": level_rows}
    (out / "results.json").write_text(json.dumps(result, indent=2))
    log(f"Scenario {args.scenario} completed: {result['summary']['overall_status']}")
    return int(scenario.get("exit_code", 1 if failed else 0))


if __name__ == "__main__":
    sys.exit(main())
