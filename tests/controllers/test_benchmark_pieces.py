"""The benchmark's pure readings of what the VSS harness writes, its command line and config
handle, and its process handling (real processes and the harness stand-in, no Docker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.kinds.experiments import processes
from controllers.kinds.experiments.benchmark import harnessreport
from controllers.kinds.experiments.benchmark.runtype import (
    _env,
    derived_config,
    environment_problems,
    harness_argv,
    list_scenarios,
    scenario_problem,
)
from controllers.kinds.experiments.capacity import harness as capacityharness
from controllers.kinds.experiments.harnessproc import HarnessError
from specs.experiments.benchmark import BenchmarkSpec

STANDIN = Path(__file__).resolve().parents[1] / "harness_standin.py"
LOGGED = "2026-12-05 10:00:00,123 - INFO -   {name}: {text} (mode: {mode}, 1 video files)"


def spec(tmp_path: Path, **more: Any) -> BenchmarkSpec:
    return BenchmarkSpec.model_validate({
        "harness": {"argv": [sys.executable, str(STANDIN)], "workdir": str(tmp_path),
                    "config": "rtvi_vlm_bcd_config.yaml"},
        "scenario": "file_burst_1_token", "mode": "file_burst", **more})


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def document(status: str = "PASS", passed: int = 1, failed: int = 0) -> dict[str, Any]:
    return {"schema_version": "0.1", "summary": {
        "total_tests": passed + failed, "passed": passed, "failed": failed,
        "overall_status": status}, "test_cases": []}


def test_scenarios_and_their_modes_are_read_from_the_harness_log() -> None:
    log = "\n".join([
        "2026-12-05 10:00:00,100 - INFO - Available test scenarios:",
        LOGGED.format(name="max_live_streams_1_token", text="BCD: max streams (x: y)",
                      mode="max_live_streams"),
        LOGGED.format(name="single", text="No description", mode="single_live_stream"),
        "2026-12-05 10:00:00,200 - INFO - unrelated: (mode: nothing here)"])
    assert harnessreport.listed_scenarios(log) == {
        "max_live_streams_1_token": "max_live_streams", "single": "single_live_stream"}


def test_a_scenario_must_be_listed_with_the_specs_mode(tmp_path: Path) -> None:
    bench = spec(tmp_path)
    assert scenario_problem(bench, {"file_burst_1_token": "file_burst"}, "") == ""
    assert scenario_problem(bench, {"other": "file_burst"}, "") == (
        "file_burst_1_token is not in the config's scenarios: other")
    assert "is a concurrency scenario in the config, but the spec says mode: file_burst" in (
        scenario_problem(bench, {"file_burst_1_token": "concurrency"}, ""))
    assert scenario_problem(bench, None, "cannot run x") == "cannot run x"


def test_the_stand_in_lists_on_stderr_and_the_run_reads_it(tmp_path: Path) -> None:
    (tmp_path / "rtvi_vlm_bcd_config.yaml").write_text(yaml.safe_dump({
        "global": {"vlm_gpus": [0]}, "test_scenarios": {
            "a_1": {"benchmark_mode": "file_burst", "videos": [{}]},
            "b_2": {"benchmark_mode": "max_live_streams"}}}))
    done = subprocess.run([sys.executable, str(STANDIN), "--config",
                           str(tmp_path / "rtvi_vlm_bcd_config.yaml"), "--list-scenarios"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == ""
    assert "Available test scenarios:" in done.stderr
    assert list_scenarios(spec(tmp_path)) == ({"a_1": "file_burst", "b_2": "max_live_streams"},
                                              "")
    (tmp_path / "rtvi_vlm_bcd_config.yaml").write_text(yaml.safe_dump({"test_scenarios": {}}))
    names, why = list_scenarios(spec(tmp_path))
    assert names is None, why
    assert why == ("--list-scenarios exited 1: Error loading configuration: "
                   "Missing 'global' section"), why
    missing = spec(tmp_path, harness={"argv": ["/nonexistent/harness"],
                                      "workdir": str(tmp_path), "config": "c.yaml"})
    names, why = list_scenarios(missing)
    assert names is None, why
    assert why.startswith("cannot run /nonexistent/harness"), why


def test_overrides_reach_the_harness_command_line_one_argv_item_per_level(
        tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    argv = harness_argv(spec(tmp_path, mode="max_live_streams", initialStreamCount=144,
                             addStreamCount=4, binarySearchRefinement=False),
                        tmp_path / "c.yaml", out)
    assert argv[2:] == ["--config", str(tmp_path / "c.yaml"), "--scenario",
                        "file_burst_1_token", "--output-json", str(out),
                        "--initial-stream-count", "144", "--add-stream-count", "4",
                        "--no-binary-search-refinement"]
    levels = harness_argv(spec(tmp_path, concurrencyLevels=[1, 8, 64]), tmp_path / "c.yaml",
                          out)
    assert levels[-4:] == ["--concurrency-levels", "1", "8", "64"]


def test_the_config_handle_changes_only_the_runs_keys(tmp_path: Path) -> None:
    (tmp_path / "rtvi_vlm_bcd_config.yaml").write_text(yaml.safe_dump({
        "global": {"output_dir": "/old", "rtvi_backend": "http://old/v1", "vlm_gpus": [0]},
        "test_scenarios": {"file_burst_1_token": {
            "benchmark_mode": "file_burst",
            "videos": [{"filepath": "/v.mp4", "vlm_api_mode": "generate_captions"},
                       {"filepath": "/w.mp4"}]}}, "seed": 7}))
    bench = spec(tmp_path, apiMode="chat_completions")
    derived = yaml.safe_load(derived_config(bench, tmp_path / "report", "http://127.0.0.1:9/"))
    assert derived == {
        "global": {"output_dir": str(tmp_path / "report"),
                   "rtvi_backend": "http://127.0.0.1:9/v1", "vlm_gpus": [0]},
        "test_scenarios": {"file_burst_1_token": {
            "benchmark_mode": "file_burst", "vlm_api_mode": "chat_completions",
            "videos": [{"filepath": "/v.mp4", "vlm_api_mode": "chat_completions"},
                       {"filepath": "/w.mp4"}]}}, "seed": 7}
    untouched = yaml.safe_load(derived_config(spec(tmp_path), tmp_path, "http://x"))
    assert "vlm_api_mode" not in untouched["test_scenarios"]["file_burst_1_token"]
    (tmp_path / "rtvi_vlm_bcd_config.yaml").write_text("- not a mapping\n")
    with pytest.raises(HarnessError, match="is not a mapping"):
        derived_config(bench, tmp_path, "http://x")


def test_the_harness_environment_holds_the_runs_service_and_the_specs_knobs_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTVI_BACKEND", "http://elsewhere:1/v1")  # the operator's shell
    monkeypatch.setenv("NGC_API_KEY", "canary-secret")
    bench = spec(tmp_path, apiMode="chat_completions",
                 harness={"argv": ["h"], "workdir": str(tmp_path), "config": "c.yaml",
                          "env": {"RTVI_BENCHMARK_BLOCKING_STREAM_DELETE": "true"}})
    env = _env(bench, "run-1", "http://127.0.0.1:18000")
    assert env["RTVI_BACKEND"] == "http://127.0.0.1:18000/v1"
    assert env["RTVI_VLM_API_MODE"] == "chat_completions"
    assert env["RTVI_BENCHMARK_BLOCKING_STREAM_DELETE"] == "true"
    assert "NGC_API_KEY" not in env
    assert env["PATH"] == os.environ["PATH"]


@pytest.mark.parametrize(("env", "message"), [
    ({"HF_TOKEN": "x"}, "Input should be 'RTVI_BENCHMARK_BLOCKING_STREAM_DELETE'"),
    ({"RTVI_BENCHMARK_STREAM_DELETE_TIMEOUT_SEC": "1\n2"}, "should match pattern")])
def test_only_the_harness_knobs_are_settable_with_plain_values(
        tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(tmp_path, harness={"argv": ["h"], "workdir": "/w", "config": "c", "env": env})


def test_acceptance_is_the_reports_pass_with_no_failure_and_partial_is_refused() -> None:
    ok = harnessreport.Outcome(0, "file_burst", document(), None)
    assert ok.judge() == []
    partial = harnessreport.Outcome(0, "concurrent_live_streams",
                                    document("PARTIAL", passed=1, failed=1), None)
    assert partial.judge() == ["summary.overall_status is 'PARTIAL'", "summary.failed is 1"]
    empty = harnessreport.Outcome(0, "max_live_streams", document(passed=0), None)
    assert empty.judge() == ["summary.total_tests is 0: nothing was measured"]


def test_a_refusal_quotes_the_harness_own_reasons() -> None:
    summary = {"total_test_cases": 1, "failed_test_cases": 1, "test_cases": [
        {"test_case_id": "max_live_streams_cam_10sec", "success": False,
         "error": "503 ServerBusy: at capacity", "resource_bound": True}]}
    log = ("2026-12-05 10:00:00,000 - INFO - === Running scenario: m ===\n"
           "2026-12-05 10:00:09,000 - ERROR - Scenario 'm' failed - no test cases passed!\n"
           "2026-12-05 10:00:09,000 - ERROR - Failed scenarios:\n")
    failed = harnessreport.Outcome(1, "max_live_streams", None, summary, log)
    assert failed.judge() == [
        "exited 1", "no --output-json report: the harness writes it only for a scenario with "
        "a passing test case", "harness: max_live_streams_cam_10sec: 503 ServerBusy: at "
        "capacity", "harness: Scenario 'm' failed - no test cases passed!"]
    assert failed.compact()["test_cases"] == [
        {"test_case_id": "max_live_streams_cam_10sec", "success": False,
         "error": "503 ServerBusy: at capacity", "resource_bound": True}]


def test_modes_without_a_json_report_are_judged_on_this_runs_execution_summary(
        tmp_path: Path) -> None:
    good = {"total_test_cases": 1, "failed_test_cases": 0, "test_cases": [{"success": True}]}
    assert harnessreport.Outcome(0, "single_live_stream", None, good).judge() == []
    bad = good | {"failed_test_cases": 1}
    assert harnessreport.Outcome(0, "single_live_stream", None, bad).judge() == [
        "1 of 1 test case(s) failed"]
    assert harnessreport.Outcome(0, "single_file", None, None).judge() == [
        "no execution_summary.json from this run: the scenario did not run to its end"]
    stale = write(tmp_path / "execution_summary.json", good)
    os.utime(stale, (time.time() - 60, time.time() - 60))
    assert harnessreport.load(stale, newer_than=time.time() - 30) is None
    assert harnessreport.load(stale) == good


def test_a_file_burst_keeps_every_level_the_last_clean_one_and_the_exact_failure(
        tmp_path: Path) -> None:
    case = tmp_path / "file_burst_clip_10sec"
    write(case / "test_case_summary.json", {"concurrency_summary": {
        str(n): {"concurrency_level": n, "mean_p95_latency": p95, "mean_p99_latency": p95 * 1.2,
                 "mean_failed_files": 0} for n, p95 in ((1, 0.5), (4, 1.0), (8, 2.0))}})
    write(case / "iteration_1" / "file_burst_results.json", {"concurrency_results": [
        {"concurrency_level": 1, "failed_files": 0}, {"concurrency_level": 4, "failed_files": 0},
        {"concurrency_level": 8, "failed_files": 3}]})
    log = ("2026-12-05 10:00:00,000 - ERROR - Error processing file 5: 503 ServerBusy: "
           "Insufficient GPU memory\n")
    burst = harnessreport.file_burst(tmp_path, log)
    assert [(lv.concurrency, lv.status, lv.failedFiles) for lv in burst.levels] == [
        (1, "PASS", 0), (4, "PASS", 0), (8, "FAIL", 3)]
    assert burst.lastClean is not None
    assert burst.lastClean.model_dump() == {"concurrency": 4, "p95Ms": 1000.0, "p99Ms": 1200.0}
    assert burst.firstFailure is not None
    assert burst.firstFailure.model_dump() == {
        "concurrency": 8, "error": "Error processing file 5: 503 ServerBusy: Insufficient GPU "
        "memory"}


def test_input_tokens_per_chunk_come_from_the_saved_answers(tmp_path: Path) -> None:
    folder = tmp_path / "case" / "iteration_1"
    write(folder / "generate_captions_response_file_0.json",
          {"chunk_responses": [{"input_tokens": 200}, {"input_tokens": 100}]})
    write(folder / "chat_completions_response_file_1.json", {"usage": {"prompt_tokens": 60}})
    assert harnessreport.prompt_tokens(tmp_path) == 120
    live = tmp_path / "live"
    write(live / "case" / "iteration_1" / "concurrent_live_streams_results.json",
          {"chunk_input_tokens_avg": 250.5})
    assert harnessreport.prompt_tokens(live) == 250.5
    assert harnessreport.prompt_tokens(tmp_path / "nothing") is None


def test_the_service_environment_must_match_the_side_of_the_pair() -> None:
    assert environment_problems(["PATH", "MODEL_PATH"], evs=False) == []
    assert environment_problems(["PATH", "VIA_EVS_TOKEN_BUDGET"], evs=False) == [
        "a non-EVS baseline with VIA_EVS_TOKEN_BUDGET set (the template's or baked into the "
        "image): it would measure EVS"]
    assert environment_problems(["VIA_EVS_SESSION"], evs=True) == [
        "an EVS run without VLM_VIDEO_PRUNING_RATE: EVS would prune nothing"]
    assert environment_problems(["VIA_EVS_SESSION", "VLM_VIDEO_PRUNING_RATE"], evs=True) == []
    assert environment_problems(None, evs=False) == ["the service's environment cannot be read"]


def test_a_recorded_process_is_ended_with_its_group_and_a_reused_pid_is_left_alone(
        tmp_path: Path) -> None:
    script = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    name = processes.name_of(proc)
    assert processes.alive(name) == proc.pid
    forged = f"pid:{proc.pid}:1"  # the same pid, another start time: not ours
    assert processes.end(forged) is None
    assert proc.poll() is None
    assert processes.end(name) is None
    proc.wait(timeout=10)
    assert processes.alive(name) is None
    group = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True)
    assert group.stdout.strip() == "", group.stdout  # the child it started went with it


def test_exit_0_without_the_json_report_is_judged_on_the_execution_summary() -> None:
    # The harness logs and swallows a failure to build its JSON, and still exits 0.
    good = {"total_test_cases": 1, "failed_test_cases": 0, "test_cases": [{"success": True}]}
    assert harnessreport.Outcome(0, "max_live_streams", None, good).judge() == []
    bad = good | {"failed_test_cases": 1}
    assert harnessreport.Outcome(0, "file_burst", None, bad).judge()[0] == (
        "1 of 1 test case(s) failed")


def test_odd_numbers_in_a_burst_count_as_failures_and_never_crash(tmp_path: Path) -> None:
    case = tmp_path / "file_burst_clip_10sec"
    write(case / "test_case_summary.json", {"concurrency_summary": {
        "1": {"mean_failed_files": 0.5, "mean_p95_latency": "fast"},
        "2": {"mean_failed_files": "n/a"}}})
    burst = harnessreport.file_burst(tmp_path, "")
    assert [(lv.concurrency, lv.status) for lv in burst.levels] == [
        (1, "FAIL"), (2, "PASS")]
    assert burst.levels[0].p95_ms is None


def test_the_harness_search_windows_take_their_verdict_from_its_boundary(
        tmp_path: Path) -> None:
    write(tmp_path / "max_live_streams_cam_10sec" / "max_live_streams_results.json", {
        "latency_snapshots": [{"stream_count": n, "p95_latency": p} for n, p in
                              ((5, 1.5), (10, 3.0), (15, 12.0), (12, 9.0), (13, 11.0))]})
    rows = capacityharness.harness_windows(tmp_path, 12, 13)
    assert [(r.streams, r.verdict, r.p95_ms) for r in rows] == [
        (5, "stable", 1500.0), (10, "stable", 3000.0), (15, "unstable", 12000.0),
        (12, "stable", 9000.0), (13, "unstable", 11000.0)]


def test_a_harness_is_interrupted_once_so_it_cleans_up_before_it_is_ended(
        tmp_path: Path) -> None:
    done = tmp_path / "cleaned"
    script = ("import signal, sys, time\n"
              "def bye(*_):\n"
              f"    open({str(done)!r}, 'w').write('cleaned up')\n"
              "    sys.exit(0)\n"
              "signal.signal(signal.SIGINT, bye)\n"
              "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
              "print('ready', flush=True)\n"
              "time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    assert processes.end(processes.name_of(proc), interrupt_s=10) is None
    assert proc.wait(timeout=10) == 0  # it left on SIGINT, not on SIGTERM (exit 3)
    assert done.read_text() == "cleaned up"
