"""What the VSS perf harness says, read from what it really writes (``shared/contracts/
vss-harness.md``): its scenario listing on stderr, its ``--output-json`` document, the
scenario folder's ``execution_summary.json`` and per-test-case files, and its log.

Pure functions over text and folders, so each reading is tested on its own. Why each source:
- The scenario list (name and ``benchmark_mode``) is only logged, on stderr:
  ``<time> - INFO -   <name>: <description> (mode: <mode>, <n> video files)``.
- Acceptance is the ``--output-json`` document's ``summary`` (``overall_status`` PASS and
  ``failed`` 0; PARTIAL is a scenario with a failed test case, which the harness itself exits 0
  on). The harness writes that document only for a successful ``file_burst``,
  ``concurrent_live_streams`` or ``max_live_streams`` scenario; for the other modes, and for
  the reason a scenario failed, ``<scenario>/execution_summary.json`` (written only when the
  scenario ran to its end: a stale one from an earlier run is ignored) and the log's ERROR
  lines are what there is.
- File-burst levels and token counts are only in the per-test-case files:
  ``test_case_summary.json`` (``concurrency_summary`` per level),
  ``iteration_<N>/file_burst_results.json`` (``failed_files`` per level) and the saved
  answers ``iteration_<N>/*_response_file_<i>.json`` (``chunk_responses[].input_tokens``, or a
  chat answer's ``usage.prompt_tokens``); live modes' results carry ``chunk_input_tokens_avg``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from state.evidence import Document

JSON_MODES = ("file_burst", "concurrent_live_streams", "max_live_streams")
LISTED = re.compile(r" - INFO - \s+(?P<name>\S+): .*\(mode: (?P<mode>[A-Za-z0-9_]+), "
                    r"\d+ video files\)\s*$")
ERROR_LINE = re.compile(r" - ERROR - (?P<text>.*\S)")
MAX_REASONS = 6
MAX_REASON_CHARS = 300


def listed_scenarios(stderr: str) -> dict[str, str]:
    """``--list-scenarios`` output: scenario name -> ``benchmark_mode``, in listed order."""
    found: dict[str, str] = {}
    for line in stderr.splitlines():
        match = LISTED.search(line)
        if match:
            found[match["name"]] = match["mode"]
    return found


def load(path: Path, newer_than: float | None = None) -> dict[str, Any] | None:
    """A JSON object from ``path`` (None when missing, unreadable, not an object, or older
    than ``newer_than``: a summary left by an earlier run proves nothing about this one)."""
    try:
        if newer_than is not None and path.stat().st_mtime < newer_than:
            return None
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _short(text: object) -> str:
    said = " ".join(str(text).split())
    return said if len(said) <= MAX_REASON_CHARS else said[:MAX_REASON_CHARS] + "…"


def reasons(summary: dict[str, Any] | None, log: str) -> list[str]:
    """Why the harness failed, in its own words: each failed test case's ``error`` (and its
    failed iterations'), then the log's ERROR lines; at most ``MAX_REASONS``."""
    found: list[str] = []
    for case in (summary or {}).get("test_cases") or []:
        if not isinstance(case, dict) or case.get("success"):
            continue
        if case.get("error"):
            found.append(f"{case.get('test_case_id')}: {_short(case['error'])}")
        for rep in case.get("iteration_results") or []:
            if isinstance(rep, dict) and rep.get("error"):
                found.append(f"{case.get('test_case_id')} iteration {rep.get('iteration')}: "
                             f"{_short(rep['error'])}")
    for line in log.splitlines():
        match = ERROR_LINE.search(line)
        if match and match["text"].strip() not in ("Failed scenarios:",):
            found.append(_short(match["text"].strip()))
    return list(dict.fromkeys(found))[:MAX_REASONS]


@dataclass
class Outcome:
    """What the harness left, read once."""

    exit_code: int | None
    mode: str
    document: dict[str, Any] | None  # the --output-json document
    summary: dict[str, Any] | None  # <scenario>/execution_summary.json, this run's
    log: str = ""

    def judge(self) -> list[str]:
        """Why the run is not accepted ([]: accepted)."""
        problems = [] if self.exit_code == 0 else [f"exited {self.exit_code}"]
        if self.mode in JSON_MODES:
            problems += self._document()
        else:
            problems += self._summary()
        if problems:
            problems += [f"harness: {r}" for r in reasons(self.summary, self.log)]
        return problems

    def _document(self) -> list[str]:
        if self.document is None and self.exit_code == 0 and self.summary is not None:
            # The harness logs and swallows a failure to build its JSON (and writes none when
            # its adaptor finds no test case): the scenario's own summary says what ran.
            return self._summary()
        if self.document is None:
            return ["no --output-json report: the harness writes it only for a scenario with "
                    "a passing test case"]
        raw = self.document.get("summary")
        summary: dict[str, Any] = raw if isinstance(raw, dict) else {}
        found = []
        if summary.get("overall_status") != "PASS":
            found.append(f"summary.overall_status is {summary.get('overall_status')!r}")
        if summary.get("failed") != 0:
            found.append(f"summary.failed is {summary.get('failed')!r}")
        if not summary.get("total_tests"):
            found.append("summary.total_tests is 0: nothing was measured")
        return found

    def _summary(self) -> list[str]:
        if self.summary is None:
            return ["no execution_summary.json from this run: the scenario did not run to "
                    "its end"]
        total = self.summary.get("total_test_cases")
        failed = self.summary.get("failed_test_cases")
        if not isinstance(total, int) or total == 0:
            return ["execution_summary.json lists no test case: nothing was measured"]
        return [] if failed == 0 else [f"{failed} of {total} test case(s) failed"]

    def compact(self) -> dict[str, Any]:
        """The execution summary without its bulky per-iteration data."""
        if self.summary is None:
            return {}
        keep = ("scenario_name", "benchmark_mode", "total_test_cases", "successful_test_cases",
                "failed_test_cases")
        cases = [{k: c.get(k) for k in ("test_case_id", "success", "error", "resource_bound")
                  if k in c} for c in self.summary.get("test_cases") or []
                 if isinstance(c, dict)]
        return {**{k: self.summary.get(k) for k in keep}, "test_cases": cases}


# --- file burst ------------------------------------------------------------------------------

def _files(value: object) -> int:
    """A count of failed files as the harness wrote it (a mean may be fractional: any failure
    counts); anything that is not a number counts as none reported."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return int(value) if value == int(value) else int(value) + 1


def _ms(seconds: object) -> float | None:
    return round(float(seconds) * 1000, 3) if isinstance(seconds, int | float) else None


def _burst_summaries(scenario_dir: Path) -> dict[int, dict[str, Any]]:
    """Each concurrency level's summary row (means of its iterations), by level."""
    rows: dict[int, dict[str, Any]] = {}
    for path in sorted(scenario_dir.glob("*/test_case_summary.json")):
        case = load(path) or {}
        for key, row in (case.get("concurrency_summary") or {}).items():
            if isinstance(row, dict) and str(key).isdigit():
                rows[int(key)] = row
    return rows


def _burst_failures(scenario_dir: Path) -> dict[int, int]:
    """Failed file requests per concurrency level, over every iteration."""
    failed: dict[int, int] = {}
    for path in sorted(scenario_dir.glob("*/iteration_*/file_burst_results.json")):
        for row in (load(path) or {}).get("concurrency_results") or []:
            if isinstance(row, dict) and isinstance(row.get("concurrency_level"), int):
                level = row["concurrency_level"]
                failed[level] = failed.get(level, 0) + _files(row.get("failed_files"))
    return failed


class BurstLevel(Document):
    """One concurrency level of a file burst: its verdict, failed files, latency (ms)."""

    concurrency: int
    status: str
    failedFiles: int = 0
    p95_ms: float | None = None
    p99_ms: float | None = None
    error: str | None = None  # the first failure's: the harness's exact error text


class CleanLevel(Document):
    concurrency: int
    p95Ms: float | None = None
    p99Ms: float | None = None


class FailedLevel(Document):
    concurrency: int
    error: str | None = None


class FileBurst(Document):
    levels: list[BurstLevel] = Field(default_factory=list)
    lastClean: CleanLevel | None = None
    firstFailure: FailedLevel | None = None


def file_burst(scenario_dir: Path, log: str) -> FileBurst:
    """Every concurrency level (p95/p99 of its iterations' means, failed files), the last clean
    level, and the first failure with the harness's exact error text from its log."""
    rows, failed = _burst_summaries(scenario_dir), _burst_failures(scenario_dir)
    errors = [m["text"] for m in map(ERROR_LINE.search, log.splitlines())
              if m and m["text"].startswith("Error processing file")]
    levels = []
    for level in sorted(set(rows) | set(failed)):
        row = rows.get(level, {})
        bad = failed.get(level, _files(row.get("mean_failed_files")))
        levels.append(BurstLevel(concurrency=level, status="FAIL" if bad else "PASS",
                                 failedFiles=bad, p95_ms=_ms(row.get("mean_p95_latency")),
                                 p99_ms=_ms(row.get("mean_p99_latency"))))
    clean = first = None
    for entry in levels:
        if entry.status == "PASS" and first is None:
            clean = entry
        elif entry.status != "PASS" and first is None:
            first = entry
            entry.error = _short(errors[0]) if errors else (
                f"{entry.failedFiles} file request(s) failed (the log names no error)")
    return FileBurst(
        levels=levels,
        lastClean=None if clean is None else CleanLevel(
            concurrency=clean.concurrency, p95Ms=clean.p95_ms, p99Ms=clean.p99_ms),
        firstFailure=None if first is None else FailedLevel(concurrency=first.concurrency,
                                                            error=first.error))


# --- tokens ----------------------------------------------------------------------------------

def prompt_tokens(scenario_dir: Path) -> float | None:
    """Mean input tokens per chunk (or per chat answer) over the run's saved answers; else the
    mean of the live modes' ``chunk_input_tokens_avg``. None when the run reported none."""
    counts: list[float] = []
    for path in sorted(scenario_dir.glob("*/iteration_*/*_response_file_*.json")):
        answer = load(path) or {}
        chunks = [c for c in answer.get("chunk_responses") or [] if isinstance(c, dict)]
        tokens = [c["input_tokens"] for c in chunks if _count(c.get("input_tokens"))]
        usage = answer.get("usage")
        if tokens:
            counts += tokens
        elif isinstance(usage, dict) and _count(usage.get("prompt_tokens")):
            counts.append(usage["prompt_tokens"])
    if not counts:
        for path in sorted(scenario_dir.rglob("*_results.json")):
            value = (load(path) or {}).get("chunk_input_tokens_avg")
            if isinstance(value, int | float) and _count(value):
                counts.append(float(value))
    return round(sum(counts) / len(counts), 3) if counts else None


def _count(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def max_live_streams(scenario_dir: Path) -> list[dict[str, Any]]:
    """Each ``max_live_streams`` test case's boundary: the highest stable and first unstable
    stream counts, whether Phase 2 (bisection) ran, and the last stable p95 (seconds)."""
    found = []
    for path in sorted(scenario_dir.glob("*/max_live_streams_results.json")):
        data = load(path) or {}
        found.append({k: data.get(k) for k in (
            "test_case_id", "max_sustainable_streams", "first_unstable_stream_count",
            "latency_threshold_seconds", "last_stable_p95", "phase2_binary_search_applied",
            "stream_add_failure", "total_dropped_chunks", "success")})
    return found
