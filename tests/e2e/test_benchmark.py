"""``type: benchmark`` end to end: the VSS perf harness, supervised. A stand-in that takes the
real harness's command line and config, drives the live-stream and file API as it does and
writes its real output layout (``tests/harness_standin.py``) runs as a process against each
run's fresh emulated service, with real RTSP sources.

Real Docker and real requests; what goes wrong is set the way it goes wrong for the real
harness: the service's capacity and latency (emulator knobs in the template), the config (a
BCD-named config with a non-BCD source), a quiet scenario window.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.conftest import Cli
from tests.e2e.daemon_helpers import status_of
from tests.e2e.stream_helpers import rtvi_deployment
from tests.emulators.rtsp_source import RtspSource
from tests.ports import free_port
from tests.specs_factory import write

RESOURCE = "Experiment/bench"
STANDIN = Path(__file__).resolve().parents[1] / "harness_standin.py"
CONFIG_NAME = "rtvi_vlm_perf_config.yaml"
PROMPT = "Describe the scene in one short sentence."


@pytest.fixture(name="rtsp")
def rtsp_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RtspSource]:
    """One RTSP source per test (about a second to start): GStreamer's RTSP server once aborted
    (``gst_rtsp_media_get_rates`` assertion) after a harness client's session, and a source
    shared by the module took every later test down with it."""
    source = RtspSource(free_port(), {"red": ("FF0000", None)},
                        tmp_path_factory.mktemp("rtsp") / "rtsp.log")
    source.start()
    yield source
    source.stop()


@pytest.fixture(scope="module", name="media")
def media_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the harness and the service both read (the service through a read-only bind
    mount at the same path, as a shared volume): the file burst's clip, the smoke clip."""
    folder = tmp_path_factory.mktemp("media")
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    "color=c=red:s=64x48:r=5", "-frames:v", "5", "-pix_fmt", "yuv420p", "-y",
                    str(folder / "clip.mp4")], check=True, timeout=60)
    return folder


def scenarios(rtsp_url: str, clip: Path) -> dict[str, Any]:
    live = {"name": "cam", "rtsp_url": rtsp_url, "chunk_sizes": [1]}
    return {
        "file_burst_1_token": {"description": "file burst", "benchmark_mode": "file_burst",
                               "videos": [{"filepath": str(clip), "chunk_sizes": [1],
                                           "concurrency_levels": [1, 2]}]},
        "file_burst_other": {"benchmark_mode": "file_burst",
                             "videos": [{"filepath": str(clip), "chunk_sizes": [1],
                                         "concurrency_levels": [1]}]},
        "single_live_stream_test": {"benchmark_mode": "single_live_stream",
                                    "videos": [{**live, "duration_seconds": 3}]},
        "concurrent_live_streams_test": {
            "benchmark_mode": "concurrent_live_streams",
            "videos": [{**live, "stream_count": [1, 3], "duration_seconds": 3}]},
        "concurrent_quiet": {"benchmark_mode": "concurrent_live_streams",
                             "videos": [{**live, "stream_count": [1], "duration_seconds": 8}]},
        "max_live_streams_test": {
            "benchmark_mode": "max_live_streams",
            "videos": [{**live, "latency_threshold_seconds": 30, "initial_stream_count": 1,
                        "add_stream_count": 1, "stability_check_interval": 2,
                        "required_stable_windows": 1, "required_unstable_windows": 1,
                        "max_stream_count": 4}]}}


def harness_config(tmp_path: Path, rtsp: RtspSource, media: Path,
                   name: str = CONFIG_NAME) -> Path:
    """The config a VSS engineer keeps in the checkout: its backend and output folder are the
    harness's defaults for a local run, which the run replaces."""
    path = tmp_path / "rt-vlm" / "perf" / "benchmark" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "global": {"rtvi_backend": "http://localhost:8010/v1", "output_dir": "rtvi-perf-report",
                   "vlm_gpus": [0], "prompt": PROMPT, "blocking_stream_delete": True},
        "test_scenarios": scenarios(rtsp.url("red"), media / "clip.mp4")}))
    return path


def pinned(path: Path) -> dict[str, str]:
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def bench(run_id: str, port: int, config: Path, **more: Any) -> dict[str, Any]:
    workdir = config.parents[2]  # services/rtvi/rt-vlm of the checkout
    body = {"harness": {"argv": [sys.executable, str(STANDIN)], "workdir": str(workdir),
                        "config": str(config.relative_to(workdir))},
            "scenario": "file_burst_1_token", "mode": "file_burst", **more}
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "bench"},
            "spec": {"type": "benchmark", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": port, "env": {"RTVI_EMU_PORT": str(port)}},
                     "measurement": {"claim": "the harness's scenario on this service"},
                     "budgetSeconds": 600, "cleanupSeconds": 20, "benchmark": body}}


def apply(cli: Cli, tmp_path: Path, image: str, media: Path, run_id: str, config: Path,
          env: dict[str, str] | None = None, executor: str = "reconciler",
          **more: Any) -> tuple[Any, dict[str, Any]]:
    specs = tmp_path / f"specs-{run_id}"
    template = rtvi_deployment(image, free_port(), **(env or {}))
    template["spec"]["mounts"] = [{"source": str(media), "target": str(media)}]
    run = bench(run_id, free_port(), config, **more)
    run["spec"]["executor"] = executor
    write(specs, template, run)
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    record = status_of(cli, RESOURCE)
    assert record is not None, done.stdout + done.stderr
    assert record["facts"]["runId"] == run_id, done.stdout + done.stderr
    return done, record["facts"]


def evidence(cli: Cli, run_id: str, relative: str) -> Any:
    return json.loads((cli.state_dir / "evidence" / run_id / relative).read_text())


def test_a_misspelt_scenario_or_another_mode_fails_before_any_service_starts(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-typo", config,
                        scenario="file_burts_1_token")
    assert done.returncode == 1, facts
    assert facts["result"] == "FAIL", facts
    gate = evidence(cli, "bench-typo", "gates/scenario.json")
    assert not gate["passed"], gate
    assert ("file_burts_1_token is not in the config's scenarios: "
            "concurrent_live_streams_test, concurrent_quiet, file_burst_1_token, "
            "file_burst_other, max_live_streams_test, single_live_stream_test") in gate[
        "reason"], gate
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-mode", config,
                        scenario="max_live_streams_test", mode="concurrent_live_streams")
    assert "max_live_streams_test is a max_live_streams scenario in the config, but the spec " \
        "says mode: concurrent_live_streams" in facts["reason"], facts
    for run_id in ("bench-typo", "bench-mode"):
        events = (cli.state_dir / "evidence" / run_id / "events.jsonl").read_text()
        assert "ServiceReady" not in events
        assert "HarnessStarted" not in events


def test_a_file_burst_is_accepted_from_the_harness_report_with_its_three_handles(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-ok", config,
                        env={"VLM_MAX_MODEL_LEN": "32768", "RTVI_EMU_MAX_MODEL_LEN": "4096",
                             "VLLM_GPU_MEMORY_UTILIZATION": "0.85", "VLLM_MAX_NUM_SEQS": "64"},
                        concurrencyLevels=[1, 2, 4], smoke=True,
                        smokeClip=pinned(media / "clip.mp4"))
    assert done.returncode == 0, (facts, done.stdout)
    assert facts["result"] == "PASS", (facts, done.stdout)
    assert set(facts["gates"]) == {"scenario", "service-environment", "smoke", "harness",
                                   "cleanup"}
    found = evidence(cli, "bench-ok", "evidence/benchmark.json")
    handles = found["handles"]
    assert Path(handles["config"]).name == CONFIG_NAME  # the harness's guards see its name
    derived = yaml.safe_load(Path(handles["config"]).read_text())
    assert derived["global"]["output_dir"] == handles["report"]  # only the run's keys changed
    assert derived["global"]["rtvi_backend"].startswith("http://127.0.0.1:")
    assert derived["global"]["rtvi_backend"].endswith("/v1")
    assert derived["test_scenarios"] == yaml.safe_load(config.read_text())["test_scenarios"]
    log = Path(handles["log"]).read_text()
    assert "Scenario 'file_burst_1_token' completed successfully!" in log
    assert found["result"]["summary"]["overall_status"] == "PASS"
    burst = found["fileBurst"]
    assert [lv["concurrency"] for lv in burst["levels"]] == [1, 2, 4]  # the levels reached it
    assert burst["lastClean"]["concurrency"] == 4
    assert burst["lastClean"]["p95Ms"] > 0
    assert burst["firstFailure"] is None
    assert found["staleLog"] == []
    assert found["promptTokens"] > 0  # from the saved answers' chunk_responses
    # The runtime as the service reported it, not as the template asked: the template asks
    # VLM_MAX_MODEL_LEN 32768, the service resolves (and logs) 4096.
    runtime = evidence(cli, "bench-ok", "manifest.json")["runtime"]
    assert runtime["source"] == "the service's start-up log"
    assert runtime["reported"]["max_model_len"] == "4096"
    assert runtime["reported"]["gpu_memory_utilization"] == "0.85"
    assert runtime["reported"]["max_num_seqs"] == "64"
    assert runtime["reported"]["preprocess_workers"] == "4"
    assert runtime["reported"]["mode"] == "cuda-graph"
    verified = cli("evidence", "bench-ok", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "plots/latency-by-streams.png" in verified.stdout  # the burst's levels, plotted
    report = (cli.state_dir / "evidence" / "bench-ok" / "report.md").read_text()
    assert "## Benchmark" in report, report
    assert f"- LOG: `{handles['log']}`" in report, report


def test_a_smoke_request_that_hangs_stops_the_run_before_the_harness(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-hang", config,
                        env={"RTVI_EMU_FILE_HANG_S": "8"}, smoke=True,
                        smokeClip=pinned(media / "clip.mp4"), smokeTimeoutSeconds=2)
    assert done.returncode == 1, facts
    assert facts["result"] == "FAIL", facts
    smoke = evidence(cli, "bench-hang", "gates/smoke.json")
    assert not smoke["passed"], smoke
    assert "request failed or hung" in smoke["reason"], smoke
    assert "left" in smoke["reason"], smoke  # the file is still in use: named, not ignored
    events = (cli.state_dir / "evidence" / "bench-hang" / "events.jsonl").read_text()
    assert "HarnessStarted" not in events


def test_a_single_live_stream_deleted_with_its_captions_open_ends_clean(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-single", config,
                        scenario="single_live_stream_test", mode="single_live_stream")
    assert done.returncode == 0, facts
    assert facts["result"] == "PASS", facts
    found = evidence(cli, "bench-single", "evidence/benchmark.json")
    assert found["result"] is None  # the harness writes no JSON for this mode
    assert found["executionSummary"]["failed_test_cases"] == 0
    case = Path(found["handles"]["report"]) / "single_live_stream_test" / \
        "single_live_stream_cam_1sec" / "test_case_summary.json"
    [iteration] = json.loads(case.read_text())["iteration_results"]
    assert iteration["captions_generation_completed"] is True  # [DONE] after the delete
    assert iteration["latency_data"]["total_measurements"] > 0


def test_a_max_live_search_finds_capacity_and_cleans_up_under_overload(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    # Two streams fit; the third add is refused with HTTP 503 ServerBusy. Each chunk takes 0.6 s
    # per live stream on 1 s chunks: at two streams every request is behind schedule, and its
    # stop must still end its caption stream within the harness's 30 s wait.
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-max", config,
                        env={"RTVI_EMU_MAX_STREAMS": "2",
                             "RTVI_EMU_LATENCY_PER_STREAM_MS": "600"},
                        scenario="max_live_streams_test", mode="max_live_streams")
    assert done.returncode == 0, facts
    assert facts["result"] == "PASS", facts
    found = evidence(cli, "bench-max", "evidence/benchmark.json")
    [case] = found["maxLiveStreams"]
    assert case["max_sustainable_streams"] == 2
    assert case["first_unstable_stream_count"] == 3
    assert case["stream_add_failure"] is True  # the 503 was the boundary, not a bad source
    log = Path(found["handles"]["log"]).read_text()
    assert "503 ServerBusy" in log, log[-3000:]
    assert "cleanup failed" not in log, log[-3000:]
    assert evidence(cli, "bench-max", "gates/cleanup.json")["passed"]


def test_a_partial_run_is_refused_with_the_harness_own_reason(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    # 1 stream passes, 3 streams hit capacity: the harness exits 0 with overall PARTIAL.
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-partial", config,
                        env={"RTVI_EMU_MAX_STREAMS": "2"},
                        scenario="concurrent_live_streams_test",
                        mode="concurrent_live_streams")
    assert done.returncode == 1, facts
    assert facts["result"] == "FAIL", facts
    found = evidence(cli, "bench-partial", "evidence/benchmark.json")
    assert found["exitCode"] == 0
    assert found["result"]["summary"]["overall_status"] == "PARTIAL"
    assert "summary.overall_status is 'PARTIAL'" in found["problems"]
    bound = [c for c in found["executionSummary"]["test_cases"] if not c["success"]]
    assert bound, found["executionSummary"]
    assert bound[0]["resource_bound"] is True, found["executionSummary"]
    assert any("3streams: 503 ServerBusy" in p for p in found["problems"]), found["problems"]


def test_a_bcd_config_keeps_its_guard_and_its_refusal_is_quoted(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media, name="rtvi_vlm_bcd_3_3_test_config.yaml")
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-bcd", config,
                        scenario="single_live_stream_test", mode="single_live_stream")
    assert done.returncode == 1, facts
    assert facts["result"] == "FAIL", facts
    assert "exited 1" in facts["reason"], facts
    assert "BCD live-source validation failed" in facts["reason"], facts


def test_a_log_quiet_beyond_its_window_is_inspected_never_killed_and_never_pass(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    done, facts = apply(cli, tmp_path, emulator_image, media, "bench-quiet", config,
                        scenario="concurrent_quiet", mode="concurrent_live_streams",
                        logStaleSeconds=5)
    assert done.returncode == 1, facts
    assert facts["result"] == "INCONCLUSIVE", facts
    assert "beyond logStaleSeconds 5 (inspected, left to finish)" in facts["reason"], facts
    found = evidence(cli, "bench-quiet", "evidence/benchmark.json")
    assert found["exitCode"] == 0
    assert found["result"]["summary"]["overall_status"] == "PASS"
    assert found["staleLog"][0]["harnessRunning"] is True, found["staleLog"]
    assert found["staleLog"][0]["serviceModel"], found["staleLog"]


def test_evs_runs_are_checked_against_their_service_and_paired_by_scenario(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient, tmp_path: Path,
        rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    evs_on = {"VIA_EVS_SESSION": "true", "VLM_VIDEO_PRUNING_RATE": "0.5",
              "VLLM_IGNORE_EOS": "true"}
    # A baseline whose service carries an EVS variable (even one set to false) is refused.
    done, facts = apply(cli, tmp_path, emulator_image, media, "base-dirty", config,
                        env={"VIA_EVS_SESSION": "false"})
    assert facts["result"] == "FAIL", facts
    assert "a non-EVS baseline with VIA_EVS_SESSION set" in facts["reason"], facts
    # ... and one baked into the image is found too: the running container is asked.
    baked = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {emulator_image}\nENV VLM_VIDEO_PRUNING_RATE=0.5\n".encode()),
        tag="rtvi-emulator:evs-baked", rm=True)[0]
    done, facts = apply(cli, tmp_path, str(baked.id), media, "base-baked", config)
    assert "a non-EVS baseline with VLM_VIDEO_PRUNING_RATE set" in facts["reason"], facts
    # A baseline that honours the end of sequence is no pair for an EVS run that ignores it.
    done, facts = apply(cli, tmp_path, emulator_image, media, "base-eos", config)
    assert facts["result"] == "PASS", facts
    done, facts = apply(cli, tmp_path, emulator_image, media, "evs-eos", config, evs=True,
                        pairWith="base-eos", env=evs_on)
    assert facts["result"] == "FAIL", facts
    assert "VLLM_IGNORE_EOS is 'unset' in run base-eos and 'true' in this run" in facts[
        "reason"], facts
    # The baseline's VLLM_IGNORE_EOS is baked into its image, not in the template: the pair
    # reads it back from the running service.
    eos = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {emulator_image}\nENV VLLM_IGNORE_EOS=true\n".encode()),
        tag="rtvi-emulator:eos-baked", rm=True)[0]
    done, facts = apply(cli, tmp_path, str(eos.id), media, "base-1", config)
    assert facts["result"] == "PASS", facts
    runtime = evidence(cli, "base-1", "manifest.json")["runtime"]
    assert runtime["environment"]["VLLM_IGNORE_EOS"] == "true", runtime
    # An EVS run on a service that ignores its EVS variables: they are there, but the input
    # tokens do not move. Paired with the baseline, that is a misconfiguration.
    done, facts = apply(cli, tmp_path, emulator_image, media, "evs-off", config, evs=True,
                        pairWith="base-1", env={**evs_on, "RTVI_EMU_EVS_IGNORED": "1"})
    assert facts["result"] == "FAIL", facts
    assert "input tokens per chunk unchanged between the baseline and the EVS run" in facts[
        "reason"], facts
    # As a job on its Host: the baseline's evidence is given to the job from evidenceRoot.
    done, facts = apply(cli, tmp_path, emulator_image, media, "evs-1", config, evs=True,
                        pairWith="base-1", env=evs_on, executor="host")
    assert done.returncode == 0, facts
    assert facts["runner"].endswith("run-evs-1"), facts
    assert facts["result"] == "PASS", facts
    pair = evidence(cli, "evs-1", "gates/evs-pairing.json")["evidence"]
    assert pair["passed"], pair
    assert pair["promptTokens"] < pair["otherPromptTokens"], pair
    # Paired by scenario: a baseline of another scenario is no pair.
    done, facts = apply(cli, tmp_path, emulator_image, media, "evs-2", config, evs=True,
                        pairWith="base-1", env=evs_on, scenario="file_burst_other")
    assert "runs are paired by scenario" in facts["reason"], facts


def test_a_capacity_search_handed_to_the_harness_reads_its_boundary(
        cli: Cli, emulator_image: str, tmp_path: Path, rtsp: RtspSource, media: Path) -> None:
    config = harness_config(tmp_path, rtsp, media)
    workdir = config.parents[2]
    port = free_port()
    experiment = {
        "apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
        "metadata": {"name": "bench"},
        "spec": {"type": "capacity", "runId": "cap-harness", "template": "vlm",
                 "service": {"hostPort": port, "env": {"RTVI_EMU_PORT": str(port)}},
                 "measurement": {"claim": "the harness's boundary on this service"},
                 "budgetSeconds": 600, "cleanupSeconds": 20,
                 "capacity": {"initialStreamCount": 1, "addStreamCount": 1,
                              "maxStreamCount": 4, "maxP95LatencyMs": 30000,
                              "harness": {"harness": {
                                  "argv": [sys.executable, str(STANDIN)],
                                  "workdir": str(workdir),
                                  "config": str(config.relative_to(workdir))},
                                  "scenario": "max_live_streams_test"}}}}
    template = rtvi_deployment(emulator_image, free_port(), RTVI_EMU_MAX_STREAMS="2")
    template["spec"]["mounts"] = [{"source": str(media), "target": str(media)}]
    specs = tmp_path / "specs-cap"
    write(specs, template, experiment)
    planned = cli("plan", str(specs))
    assert "harness scenario max_live_streams_test" in planned.stdout, planned.stdout
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    record = status_of(cli, RESOURCE)
    assert record is not None, done.stdout + done.stderr
    facts = record["facts"]
    assert done.returncode == 0, (facts, done.stdout)
    assert facts["result"] == "PASS", (facts, done.stdout)
    assert set(facts["gates"]) == {"scenario", "harness", "capacity-boundary", "cleanup"}
    capacity = evidence(cli, "cap-harness", "evidence/capacity.json")
    assert capacity["searchedBy"] == "harness"
    assert (capacity["highestStable"], capacity["firstUnstable"]) == (2, 3)
    assert capacity["windows"]
    assert {w["streams"] for w in capacity["windows"]} == {1, 2}
    report = (cli.state_dir / "evidence" / "cap-harness" / "report.md").read_text()
    assert "Searched by the VSS harness (scenario max_live_streams_test)" in report, report
    verified = cli("evidence", "cap-harness", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
