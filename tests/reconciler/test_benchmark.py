"""The VSS benchmark harness, supervised: a stand-in that speaks its command line and report
(``tests/harness_standin.py``) runs as a process against each run's fresh emulated service.

Real Docker and real requests; the stand-in's behaviour (a failing level, a quiet log, a bad
source gate) is set in its config, the service's EVS variables in the template's environment.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import yaml

from tests.conftest import Cli, free_port
from tests.reconciler.daemon_helpers import status_of
from tests.reconciler.stream_helpers import rtvi_deployment
from tests.specs_factory import write

RESOURCE = "Experiment/bench"
STANDIN = Path(__file__).resolve().parents[1] / "harness_standin.py"
SCENARIOS = {"file_burst_1_token_2k": {"mode": "file-burst", "concurrency_levels": [1, 2, 4]},
             "max_live_streams_test_1_token": {"mode": "max-live"}}


def harness_config(tmp_path: Path, **behaviour: Any) -> Path:
    scenarios = json.loads(json.dumps(SCENARIOS))
    scenarios["file_burst_1_token_2k"].update(behaviour)
    path = tmp_path / "harness" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"output_dir": "/nowhere", "rtvi_url": "http://nowhere",
                                    "scenarios": scenarios}))
    return path


def clip(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "smoke.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    "color=c=red:s=64x48:r=5", "-frames:v", "5", "-pix_fmt", "yuv420p", "-y",
                    str(path)], check=True, timeout=60)
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def bench(run_id: str, port: int, config: Path, **more: Any) -> dict[str, Any]:
    body = {"harness": {"argv": [sys.executable, str(STANDIN)], "workdir": str(config.parent),
                        "config": config.name},
            "scenario": "file_burst_1_token_2k", "mode": "file-burst", **more}
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "bench"},
            "spec": {"type": "benchmark", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": port, "env": {"RTVI_EMU_PORT": str(port)}},
                     "measurement": {"claim": "file burst throughput"},
                     "budgetSeconds": 600, "cleanupSeconds": 20, "benchmark": body}}


def apply(cli: Cli, tmp_path: Path, image: str, run_id: str, config: Path,
          env: dict[str, str] | None = None, **more: Any) -> tuple[Any, dict[str, Any]]:
    specs = tmp_path / f"specs-{run_id}"
    write(specs, rtvi_deployment(image, free_port(), **(env or {})),
          bench(run_id, free_port(), config, **more))
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    record = status_of(cli, RESOURCE)
    assert record is not None and record["facts"]["runId"] == run_id, done.stdout + done.stderr
    return done, record["facts"]


def evidence(cli: Cli, run_id: str, relative: str) -> Any:
    return json.loads((cli.state_dir / "evidence" / run_id / relative).read_text())


def test_a_misspelt_scenario_fails_before_any_service_starts(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    config = harness_config(tmp_path)
    done, facts = apply(cli, tmp_path, emulator_image, "bench-typo", config,
                        scenario="file_burts_1_token_2k")
    assert done.returncode == 1 and facts["result"] == "FAIL", facts
    gate = evidence(cli, "bench-typo", "gates/scenario.json")
    assert not gate["passed"] and "file_burts_1_token_2k is not in the config's scenarios: " \
        "file_burst_1_token_2k, max_live_streams_test_1_token" in gate["reason"], gate
    events = (cli.state_dir / "evidence" / "bench-typo" / "events.jsonl").read_text()
    assert "ServiceReady" not in events and "HarnessStarted" not in events


def test_a_file_burst_is_accepted_with_its_three_handles_after_a_smoke(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    config = harness_config(tmp_path)
    done, facts = apply(cli, tmp_path, emulator_image, "bench-ok", config,
                        concurrencyLevels=[1, 2, 4], smoke=True, smokeClip=clip(tmp_path))
    assert done.returncode == 0 and facts["result"] == "PASS", (facts, done.stdout)
    assert set(facts["gates"]) == {"scenario", "service-environment", "smoke", "harness",
                                   "cleanup"}
    found = evidence(cli, "bench-ok", "evidence/benchmark.json")
    handles = found["handles"]
    derived = yaml.safe_load(Path(handles["config"]).read_text())
    assert derived["output_dir"] == handles["report"]  # only the run's keys changed
    assert derived["rtvi_url"].startswith("http://127.0.0.1:")
    assert derived["scenarios"]["file_burst_1_token_2k"]["vlm_api_mode"] == "generate_captions"
    assert "Scenario file_burst_1_token_2k completed: PASS" in Path(handles["log"]).read_text()
    assert found["result"]["options"]["levels"] == [1, 2, 4]  # the overrides reached it
    assert found["fileBurst"]["lastClean"]["concurrency"] == 4
    assert found["fileBurst"]["firstFailure"] is None
    assert found["staleLog"] == []
    verified = cli("evidence", "bench-ok", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "plots/latency-by-streams.png" in verified.stdout  # the burst's levels, plotted
    report = (cli.state_dir / "evidence" / "bench-ok" / "report.md").read_text()
    assert "## Benchmark" in report and f"- LOG: `{handles['log']}`" in report, report


def test_a_smoke_request_that_hangs_stops_the_run_before_the_harness(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    config = harness_config(tmp_path)
    done, facts = apply(cli, tmp_path, emulator_image, "bench-hang", config,
                        env={"RTVI_EMU_FILE_HANG_S": "8"}, smoke=True,
                        smokeClip=clip(tmp_path), smokeTimeoutSeconds=2)
    assert done.returncode == 1 and facts["result"] == "FAIL", facts
    smoke = evidence(cli, "bench-hang", "gates/smoke.json")
    assert not smoke["passed"] and "request failed or hung" in smoke["reason"], smoke
    assert "left" in smoke["reason"], smoke  # the file is still in use: named, not ignored
    events = (cli.state_dir / "evidence" / "bench-hang" / "events.jsonl").read_text()
    assert "HarnessStarted" not in events


def test_a_log_quiet_beyond_its_window_is_inspected_never_killed_and_never_pass(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    config = harness_config(tmp_path, quiet_seconds=7)
    done, facts = apply(cli, tmp_path, emulator_image, "bench-quiet", config, logStaleSeconds=5)
    assert done.returncode == 1 and facts["result"] == "INCONCLUSIVE", facts
    assert "beyond logStaleSeconds 5 (inspected, left to finish)" in facts["reason"], facts
    found = evidence(cli, "bench-quiet", "evidence/benchmark.json")
    assert found["exitCode"] == 0 and found["result"]["summary"]["overall_status"] == "PASS"
    assert found["staleLog"][0]["harnessRunning"] is True and found["staleLog"][0][
        "serviceModel"], found["staleLog"]
    events = (cli.state_dir / "evidence" / "bench-quiet" / "events.jsonl").read_text()
    assert '"reason": "LogStale"' in events


def test_a_report_of_pass_with_a_failure_is_not_pass(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    config = harness_config(tmp_path, report_failed=1)
    done, facts = apply(cli, tmp_path, emulator_image, "bench-liar", config)
    assert done.returncode == 1 and facts["result"] == "FAIL", facts
    assert "summary.failed is 1" in facts["reason"], facts


def test_an_overloaded_level_fails_acceptance_keeping_the_last_clean_level_and_its_text(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    failure = "RuntimeError: request 3 of 4 failed: 503 ServerBusy"
    config = harness_config(tmp_path, fail_at=4, failure=failure)
    done, facts = apply(cli, tmp_path, emulator_image, "bench-burst", config)
    assert done.returncode == 1 and facts["result"] == "FAIL", facts
    found = evidence(cli, "bench-burst", "evidence/benchmark.json")
    burst = found["fileBurst"]
    assert [lv["concurrency"] for lv in burst["levels"]] == [1, 2, 4]
    assert burst["lastClean"]["concurrency"] == 2 and burst["lastClean"]["p95Ms"] > 0
    assert burst["firstFailure"] == {"concurrency": 4, "error": failure}
    assert "exited 1" in found["problems"] and "summary.failed is 1" in found["problems"]


def test_evs_runs_are_checked_against_their_service_and_paired_by_scenario(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    config = harness_config(tmp_path)
    evs_on = {"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5",
              "VLLM_IGNORE_EOS": "true"}
    # A baseline whose service carries an EVS variable (even one set to false) is refused.
    done, facts = apply(cli, tmp_path, emulator_image, "base-dirty", config,
                        env={"VIA_EVS_SESSION": "false"})
    assert facts["result"] == "FAIL", facts
    assert "a non-EVS baseline with VIA_EVS_SESSION set" in facts["reason"], facts
    # ... and one baked into the image is found too: the running container is asked.
    baked = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {emulator_image}\nENV VLM_VIDEO_PRUNING_RATE=0.5\n".encode()),
        tag="rtvi-emulator:evs-baked", rm=True)[0]
    done, facts = apply(cli, tmp_path, str(baked.id), "base-baked", config)
    assert "a non-EVS baseline with VLM_VIDEO_PRUNING_RATE set" in facts["reason"], facts
    done, facts = apply(cli, tmp_path, emulator_image, "base-1", config)
    assert facts["result"] == "PASS", facts
    # An EVS run on a service that ignores its EVS variables: they are there, but the prompt
    # tokens do not move — paired with the baseline, that is a misconfiguration.
    done, facts = apply(cli, tmp_path, emulator_image, "evs-off", config, evs=True,
                        pairWith="base-1", env={**evs_on, "RTVI_EMU_EVS_IGNORED": "1"})
    assert facts["result"] == "FAIL", facts
    assert "prompt tokens unchanged between the baseline and the EVS run" in facts["reason"]
    done, facts = apply(cli, tmp_path, emulator_image, "evs-1", config, evs=True,
                        pairWith="base-1", env=evs_on)
    assert done.returncode == 0 and facts["result"] == "PASS", facts
    pair = evidence(cli, "evs-1", "gates/evs-pairing.json")["evidence"]
    assert pair["passed"] and pair["promptTokens"] < pair["otherPromptTokens"], pair
    # Paired by scenario: a baseline of another scenario is no pair.
    done, facts = apply(cli, tmp_path, emulator_image, "evs-2", config, evs=True,
                        pairWith="base-1", env=evs_on,
                        scenario="max_live_streams_test_1_token", mode="max-live")
    assert "runs are paired by scenario" in facts["reason"], facts
