"""The benchmark's pure judgements and its process handling (real processes, no Docker)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.experiments import processes
from controllers.experiments.benchmark import (
    HarnessError,
    acceptance,
    derived_config,
    environment_problems,
    file_burst,
    harness_argv,
    list_scenarios,
)
from specs.experiment import BenchmarkSpec

STANDIN = Path(__file__).resolve().parents[1] / "harness_standin.py"


def spec(tmp_path: Path, **more: Any) -> BenchmarkSpec:
    return BenchmarkSpec.model_validate({
        "harness": {"argv": [sys.executable, str(STANDIN)], "workdir": str(tmp_path),
                    "config": "config.yaml"},
        "scenario": "file_burst_1_token", "mode": "file-burst", **more})


def accepted() -> dict[str, Any]:
    return {"summary": {"overall_status": "PASS", "failed": 0},
            "repetitions": [{"source_gates": {"passed": True}}]}


def test_acceptance_needs_exit_0_pass_no_failure_and_every_source_gate() -> None:
    assert acceptance(0, accepted()) == []
    assert acceptance(1, None) == ["exited 1 without a report"]
    bad = accepted() | {"summary": {"overall_status": "FAIL", "failed": 2}}
    assert acceptance(3, bad) == ["exited 3", "summary.overall_status is 'FAIL'",
                                  "summary.failed is 2"]
    gates = accepted() | {"repetitions": [{"source_gates": {"passed": True}},
                                          {"source_gates": {"passed": False, "distinct": 7}}]}
    assert acceptance(0, gates) == [
        "repetition 2: source gates did not pass ({'passed': False, 'distinct': 7})"]
    assert acceptance(0, accepted() | {"repetitions": []}) == [
        "no repetition reported: source gates cannot be checked"]


def test_a_file_burst_keeps_every_level_the_last_clean_one_and_the_exact_failure() -> None:
    levels = [{"concurrency": 8, "status": "FAIL", "error": "Timeout after 600 s"},
              {"concurrency": 1, "status": "PASS", "p95_ms": 10, "p99_ms": 12},
              {"concurrency": 4, "status": "PASS", "p95_ms": 40, "p99_ms": 55},
              {"concurrency": 16, "status": "FAIL", "error": "503"}]
    burst = file_burst({"concurrency_levels": levels})
    assert len(burst["levels"]) == 4
    assert burst["lastClean"] == {"concurrency": 4, "p95Ms": 40, "p99Ms": 55}
    assert burst["firstFailure"] == {"concurrency": 8, "error": "Timeout after 600 s"}


def test_the_service_environment_must_match_the_side_of_the_pair() -> None:
    assert environment_problems(["PATH", "MODEL_PATH"], evs=False) == []
    assert environment_problems(["PATH", "VIA_EVS_TOKEN_BUDGET"], evs=False) == [
        "a non-EVS baseline with VIA_EVS_TOKEN_BUDGET set (the template's or baked into the "
        "image): it would measure EVS"]
    assert environment_problems(["VIA_EVS_SESSION"], evs=True) == [
        "an EVS run without VLM_VIDEO_PRUNING_RATE: EVS would prune nothing"]
    assert environment_problems(["VIA_EVS_SESSION", "VLM_VIDEO_PRUNING_RATE"], evs=True) == []
    assert environment_problems(None, evs=False) == ["the service's environment cannot be read"]


def test_overrides_reach_the_harness_command_line(tmp_path: Path) -> None:
    argv = harness_argv(spec(tmp_path, mode="max-live", initialStreamCount=144,
                             addStreamCount=4, binarySearchRefinement=False),
                        tmp_path / "c.yaml")
    assert argv[2:] == ["--config", str(tmp_path / "c.yaml"), "--scenario",
                        "file_burst_1_token", "--initial-stream-count", "144",
                        "--add-stream-count", "4", "--no-binary-search-refinement"]
    levels = harness_argv(spec(tmp_path, concurrencyLevels=[1, 8, 64]), tmp_path / "c.yaml")
    assert levels[-2:] == ["--concurrency-levels", "1,8,64"]


def test_the_config_handle_changes_only_the_runs_keys(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "output_dir": "/old", "rtvi": {"url": "http://old", "timeout": 5},
        "scenarios": {"file_burst_1_token": {"mode": "file-burst"}}, "seed": 7}))
    bench = spec(tmp_path, apiMode="chat_completions",
                 harness={"argv": ["h"], "workdir": str(tmp_path), "config": "config.yaml",
                          "serviceUrlKey": "rtvi.url"})
    derived = yaml.safe_load(derived_config(bench, tmp_path / "report", "http://127.0.0.1:9"))
    assert derived == {"output_dir": str(tmp_path / "report"),
                       "rtvi": {"url": "http://127.0.0.1:9", "timeout": 5},
                       "scenarios": {"file_burst_1_token": {
                           "mode": "file-burst", "vlm_api_mode": "chat_completions"}},
                       "seed": 7}
    (tmp_path / "config.yaml").write_text("- not a mapping\n")
    with pytest.raises(HarnessError, match="is not a mapping"):
        derived_config(bench, tmp_path, "http://x")


def test_scenarios_are_listed_by_the_harness_itself(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"scenarios": {"a_1": {}, "b_2": {}}}))
    assert list_scenarios(spec(tmp_path)) == (["a_1", "b_2"], "")
    (tmp_path / "config.yaml").write_text(":\n- [")
    names, why = list_scenarios(spec(tmp_path))
    assert names is None and why.startswith("--list-scenarios exited 1: "), why
    missing = spec(tmp_path, harness={"argv": ["/nonexistent/harness"],
                                      "workdir": str(tmp_path), "config": "c.yaml"})
    names, why = list_scenarios(missing)
    assert names is None and why.startswith("cannot run /nonexistent/harness"), why


def test_a_recorded_process_is_ended_with_its_group_and_a_reused_pid_is_left_alone(
        tmp_path: Path) -> None:
    script = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    name = processes.name_of(proc)
    assert processes.alive(name) == proc.pid
    forged = f"pid:{proc.pid}:1"  # the same pid, another start time: not ours
    assert processes.end(forged) is None and proc.poll() is None
    assert processes.end(name) is None
    proc.wait(timeout=10)
    assert processes.alive(name) is None
    group = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True)
    assert group.stdout.strip() == "", group.stdout  # the child it started went with it
