"""Experiments end to end: canaries on a fresh emulated service, their evidence and their rules.

Real Docker, real publishers (GStreamer RTSP servers), real decoding in the emulator. Faults are
set in the template's environment (``RTVI_EMU_FAULTS``) because the run starts its own service;
the stream IDs they name are the run's deterministic ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import pytest

from controllers.kinds.experiments.streams import stream_id
from controllers.ownership import LABEL_RUN_ID, LABEL_SOURCE, project_name
from state.keys import Key
from tests.conftest import Cli
from tests.e2e.daemon_helpers import DaemonProcess, run_containers, status_of, wait_for
from tests.e2e.stream_helpers import rtvi_deployment
from tests.ports import free_port
from tests.specs_factory import write

RESOURCE = Key("Experiment", "canary")


def canary(run_id: str, port: int, telemetry: dict[str, Any] | None = None,
           cleanup_s: int = 10, executor: str | None = "reconciler", **canary_spec: Any
           ) -> dict[str, Any]:
    """``executor``: these tests are about the canary's gates, which are the same code in a
    job and in the reconciler's process, so they run in the process (no runner to start and
    follow: seconds per run); None gives the default, a job on its Host, as the four-colour
    canary here and ``test_host_jobs`` run it."""
    body = {"streams": 4, "chunkDurationSeconds": 1, "performanceSeconds": 5,
            "freshFrameSeconds": 15, **canary_spec}
    more: dict[str, Any] = {"telemetry": telemetry} if telemetry is not None else {}
    if executor is not None:
        more["executor"] = executor
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "canary"},
            "spec": {"type": "canary", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": port, "env": {"RTVI_EMU_PORT": str(port)}},
                     "measurement": {"claim": "streams are isolated and drop no chunk"},
                     "budgetSeconds": 300, "cleanupSeconds": cleanup_s, "canary": body,
                     **more}}


def specs_with(tmp_path: Path, image: str, run_id: str, faults: list[dict[str, Any]] | None = None,
               telemetry: dict[str, Any] | None = None, cleanup_s: int = 10,
               executor: str | None = "reconciler", **canary_spec: Any) -> Path:
    env = {"RTVI_EMU_FAULTS": json.dumps(faults)} if faults else {}
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(image, free_port(), **env),
          canary(run_id, free_port(), telemetry, cleanup_s, executor, **canary_spec))
    return specs


def sid(cli: Cli, run_id: str, part: str, source: str) -> str:
    return stream_id(cli.instance, RESOURCE, run_id, part, source)


def facts(cli: Cli) -> dict[str, Any]:
    record = status_of(cli, RESOURCE)
    assert record is not None
    return dict(record["facts"])


def gate(cli: Cli, run_id: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((evidence_dir(cli, run_id) / "gates" / f"{name}.json")
                                      .read_text())
    return data


def evidence_dir(cli: Cli, run_id: str) -> Path:
    return cli.state_dir / "evidence" / run_id


def test_a_four_colour_canary_passes_once_with_evidence_that_verifies(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = specs_with(tmp_path, emulator_image, "four-1", smoke=True, executor=None)
    planned = cli("plan", str(specs))
    assert f"create container {project_name('four-1')}" in planned.stdout, planned.stdout
    assert "publish 4 source(s)" in planned.stdout
    assert "budget 300s" in planned.stdout
    # The default: a job on its Host, reading its telemetry there (this machine has no GPU).
    assert ("GPU telemetry: NVML (else nvidia-smi) in the job, reading no GPU the Host "
            "reports") in planned.stdout, planned.stdout
    assert "executes as a job on Host local" in planned.stdout, planned.stdout
    done = cli("apply", str(specs), "--timeout", "240", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    known = facts(cli)
    assert (known["phase"], known["result"]) == ("Done", "PASS"), known
    assert set(known["gates"]) == {"semantic-isolation", "probe-streams-deleted", "smoke",
                                   "performance", "cleanup"}
    smoke = gate(cli, "four-1", "smoke")["evidence"]
    assert smoke["maxTokens"] == 1, smoke
    assert smoke["left"] == [], smoke
    assert smoke["chunks"], smoke
    assert all(v.startswith("PASS") for v in known["gates"].values()), known["gates"]
    assert not [c for c in run_containers(docker_client, cli.instance, RESOURCE)
                if c.labels.get("rtvi.reconciler/instance") == cli.instance]
    table = cli("status")
    assert "PHASE" in table.stdout, table.stdout
    assert "PASS" in table.stdout, table.stdout
    isolation = json.loads((evidence_dir(cli, "four-1") / "evidence" /
                            "semantic-isolation.json").read_text())
    assert {m["label"] for m in isolation["mapping"]} == {"red", "green", "blue", "yellow"}
    assert all(len(v["answers"]) == 3 and v["passed"] for v in isolation["verdicts"])
    ledger = gate(cli, "four-1", "performance")["evidence"]["ledger"]
    assert (ledger["offered"], ledger["completed"], ledger["cleaned_up"]) == (4, 4, 4), ledger
    verified = cli("evidence", "four-1", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "report: report.md" in verified.stdout, verified.stdout
    assert "plots: plots/gpu-memory.png, plots/latency-by-streams.png" in verified.stdout
    telemetry = json.loads((evidence_dir(cli, "four-1") / "evidence" / "telemetry.json")
                           .read_text())
    assert telemetry["required"] is False
    assert telemetry["source"] in ("nvml", "nvidia-smi")
    if telemetry["source"] == "nvidia-smi":  # a machine without GPUs: why, never a zero
        assert telemetry["start"].startswith("not measured (nvidia-smi on Host local ")
        assert telemetry["window"] == telemetry["start"] == telemetry["end"]
    # Re-applying a terminal run does nothing: no new event in its evidence, same files.
    before = (evidence_dir(cli, "four-1") / "events.jsonl").read_bytes()
    again = cli("apply", str(specs), "--timeout", "60")
    assert again.returncode == 0, again.stdout
    assert "PASS: run four-1" in again.stdout, again.stdout
    assert (evidence_dir(cli, "four-1") / "events.jsonl").read_bytes() == before
    # A changed spec under the same run ID is refused at plan time.
    doc = canary("four-1", free_port(), performanceSeconds=6)
    write(specs, *[d for d in _docs(specs) if d["kind"] != "Experiment"], doc, host=False)
    refused = cli("plan", str(specs))
    assert refused.returncode == 1, refused.stdout
    assert "a run ID is used once" in refused.stdout, refused.stdout
    # One changed byte anywhere in the bundle fails --verify, naming the file.
    target = evidence_dir(cli, "four-1") / "gates" / "performance.json"
    data = bytearray(target.read_bytes())
    data[10] ^= 0x01
    target.write_bytes(bytes(data))
    broken = cli("evidence", "four-1", "--verify")
    assert broken.returncode == 1
    assert "gates/performance.json" in broken.stdout + broken.stderr


def _docs(specs: Path) -> list[dict[str, Any]]:
    import yaml
    return list(yaml.safe_load_all((specs / "specs.yaml").read_text()))


def test_swapped_streams_fail_the_isolation_gate_naming_both_and_cleanup_proves_zero(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    run_id = "swap-1"
    swap = {"kind": "swap_captions", "streams": [sid(cli, run_id, "probe", "red"),
                                                 sid(cli, run_id, "probe", "green")]}
    specs = specs_with(tmp_path, emulator_image, run_id, [swap], streams=2)
    done = cli("apply", str(specs), "--timeout", "240", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert facts(cli)["result"] == "FAIL"
    isolation = gate(cli, run_id, "semantic-isolation")
    assert not isolation["passed"]
    assert "red (red)" in isolation["reason"]
    assert "green (green)" in isolation["reason"]
    assert "that is green" in isolation["reason"]
    assert "that is red" in isolation["reason"]
    assert gate(cli, run_id, "cleanup")["passed"] is True
    assert not (evidence_dir(cli, run_id) / "gates" / "performance.json").exists()
    assert not run_containers(docker_client, cli.instance, RESOURCE)
    assert cli("evidence", run_id, "--verify").returncode == 0


@pytest.mark.parametrize(("fault", "part", "failed_gate", "reason"), [
    ("drop_chunk_ids", "perf0", "performance", "dropped chunks"),
    ("error_in_event", "perf0", "performance", "error inside a 200 answer"),
    ("stuck_delete", "probe", "probe-streams-deleted", "probe stream(s) not deleted"),
])
def test_failed_work_behind_a_200_fails_the_canary_with_its_reason(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient, tmp_path: Path,
        fault: str, part: str, failed_gate: str, reason: str) -> None:
    run_id = f"fault-{fault.replace('_', '-')}"
    specs = specs_with(tmp_path, emulator_image, run_id,
                       [{"kind": fault, "streams": [sid(cli, run_id, part, "red")]}], streams=2)
    done = cli("apply", str(specs), "--timeout", "240", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    known = facts(cli)
    assert known["result"] == "FAIL", known
    verdict = gate(cli, run_id, failed_gate)
    assert not verdict["passed"], verdict
    assert reason in verdict["reason"], verdict
    assert reason in known["reason"], known["reason"]
    if fault == "stuck_delete":  # the stream never went: cleanup cannot prove zero
        assert "refused deletion" in gate(cli, run_id, "cleanup")["reason"]
    else:
        assert gate(cli, run_id, "semantic-isolation")["passed"] is True
        assert gate(cli, run_id, "cleanup")["passed"] is True
    assert not run_containers(docker_client, cli.instance, RESOURCE)  # service, stuck stream gone


def test_qualification_only_passes_after_the_isolation_gates(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    specs = specs_with(tmp_path, emulator_image, "qual-1", streams=2, qualificationOnly=True)
    done = cli("apply", str(specs), "--timeout", "200", timeout=260)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(facts(cli)["gates"]) == {"semantic-isolation", "probe-streams-deleted",
                                        "cleanup"}


def test_a_sixteen_stream_solid_and_border_canary_passes(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    # Cleanup removes 17 containers and proves 16 streams gone: 10 s was too short once on a
    # loaded machine ("cleanup could not prove zero leftovers"). A deadline is a bound, not a
    # wait: a cleanup proven sooner ends sooner.
    specs = specs_with(tmp_path, emulator_image, "sixteen-1", cleanup_s=60, streams=16,
                       chunkDurationSeconds=2, freshFrameSeconds=40)
    done = cli("apply", str(specs), "--timeout", "280", timeout=320)
    assert done.returncode == 0, (done.stdout + done.stderr  # and, failing, what each gate said
                                  + cli("evidence", "sixteen-1").stdout)
    isolation = json.loads((evidence_dir(cli, "sixteen-1") / "evidence" /
                            "semantic-isolation.json").read_text())
    labels = {m["label"] for m in isolation["mapping"]}
    assert len(labels) == 16
    assert {"red solid", "red border", "white border"} <= labels
    ledger = gate(cli, "sixteen-1", "performance")["evidence"]["ledger"]
    assert (ledger["offered"], ledger["completed"], ledger["active"]) == (16, 16, 16), ledger
    assert cli("evidence", "sixteen-1", "--verify").returncode == 0


def test_required_telemetry_that_cannot_be_read_fails_the_run_before_it_starts_anything(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    run_id = "telemetry-1"
    url = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    specs = specs_with(tmp_path, emulator_image, run_id,
                       telemetry={"dcgmUrl": url, "required": True})
    assert "GPU telemetry: dcgm (required)" in cli("plan", str(specs)).stdout
    done = cli("apply", str(specs), "--timeout", "120", timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    known = facts(cli)
    assert known["result"] == "FAIL", known
    assert known["reason"].startswith("preflight: required GPU telemetry cannot be read: "
                                      f"DCGM exporter at {url}: ConnectError"), known["reason"]
    assert not run_containers(docker_client, cli.instance, RESOURCE)
    events = (evidence_dir(cli, run_id) / "events.jsonl").read_text()
    assert "ServiceReady" not in events
    assert "TelemetryUnavailable" in events
    telemetry = json.loads((evidence_dir(cli, run_id) / "evidence" / "telemetry.json")
                           .read_text())
    assert telemetry["source"] == "dcgm"
    assert telemetry["dcgmUrl"] == url
    assert telemetry["start"].startswith(f"not measured (DCGM exporter at {url}: ")
    assert gate(cli, run_id, "cleanup")["passed"] is True
    assert cli("evidence", run_id, "--verify").returncode == 0


def test_a_foreign_container_with_the_runs_name_is_a_conflict_left_untouched(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    run_id = "guarded-1"
    foreign = docker_client.containers.create(emulator_image, name=project_name(run_id),
                                              command=["true"])
    try:
        specs = specs_with(tmp_path, emulator_image, run_id)
        planned = cli("plan", str(specs))
        assert "Conflict" in planned.stdout
        assert "is not this run's" in planned.stdout
        done = cli("apply", str(specs), "--timeout", "60")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Conflict" in done.stdout, done.stdout + done.stderr
        foreign.reload()
        assert foreign.status == "created"  # untouched
        assert not evidence_dir(cli, run_id).exists()  # the run ID is not spent
    finally:
        foreign.remove(force=True)


def test_kill_9_during_running_gives_inconclusive_and_cleanup_leaves_nothing(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    run_id = "killed-1"  # a run in the reconciler's process dies with it (a job would not)
    specs = specs_with(tmp_path, emulator_image, run_id, streams=2, performanceSeconds=60,
                       executor="reconciler")
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"],
                           tmp_path / "daemon.log")
    try:
        wait_for("the run to reach its performance part", lambda: "performance" in str(
            (status_of(cli, RESOURCE) or {}).get("conditions")), 180, 0.2)
        running = run_containers(docker_client, cli.instance, RESOURCE)
        # The service and one publisher per stream, each labelled with the run's ID (the perf
        # field guide: every container of a run carries it).
        assert len(running) == 3, [c.name for c in running]
        assert sum(LABEL_SOURCE in c.labels for c in running) == 2, [c.labels for c in running]
        assert {c.labels.get(LABEL_RUN_ID) for c in running} == {run_id}, [
            c.labels for c in running]
    finally:
        daemon.kill9()
    assert "result" not in facts(cli)  # killed mid-run: no verdict yet
    done = cli("apply", str(specs), "--timeout", "120", timeout=180)
    known = facts(cli)
    assert known["result"] == "INCONCLUSIVE", (known, done.stdout, done.stderr)
    assert "interrupted during Running" in known["reason"]
    assert gate(cli, run_id, "cleanup")["passed"] is True
    assert not run_containers(docker_client, cli.instance, RESOURCE)
    assert cli("evidence", run_id, "--verify").returncode == 0


def _phase_reached(cli: Cli, run_id: str, text: str) -> bool:
    record = status_of(cli, RESOURCE) or {}
    return (record.get("facts", {}).get("runId") == run_id
            and text in str(record.get("conditions")))


def test_the_daemon_stops_runs_on_sigterm_and_on_spec_removal_and_cleans_up_after(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    template = rtvi_deployment(emulator_image, free_port())
    specs = tmp_path / "specs"
    # Runs in the reconciler's process: SIGTERM ends them (a job would run on).
    write(specs, template, canary("daemon-1", free_port(), streams=2, performanceSeconds=120,
                                  executor="reconciler"))
    args = ["--specs", str(specs), "--resync", "3600", "--shutdown-timeout", "10"]
    first = DaemonProcess(cli, args, tmp_path / "daemon-1.log")
    wait_for("run daemon-1 to reach its performance part",
             lambda: _phase_reached(cli, "daemon-1", "performance"), 180, 0.2)
    assert first.terminate(timeout=15) == 0  # SIGTERM mid-run: a clean exit (limit 10 s)
    assert "result" not in facts(cli)
    second = DaemonProcess(cli, args, tmp_path / "daemon-2.log")
    try:
        wait_for("the interrupted run to be finished", lambda: facts(cli).get("result"), 120,
                 0.2)
        known = facts(cli)
        assert known["result"] == "INCONCLUSIVE", known
        assert "interrupted during Running" in known["reason"], known
        assert gate(cli, "daemon-1", "cleanup")["passed"] is True
        assert not run_containers(docker_client, cli.instance, RESOURCE)
        # A new run; then its spec goes away mid-run: the run is stopped and cleaned up, the
        # record pruned, the evidence kept.
        write(specs, template, canary("daemon-2", free_port(), streams=2,
                                      performanceSeconds=120, executor="reconciler"),
              host=True)
        wait_for("run daemon-2 to reach its performance part",
                 lambda: _phase_reached(cli, "daemon-2", "performance"), 180, 0.2)
        write(specs, template)
        wait_for("the Experiment to be pruned", lambda: status_of(cli, RESOURCE) is None, 120,
                 0.2)
    finally:
        assert second.terminate(timeout=20) == 0
    summary = json.loads((evidence_dir(cli, "daemon-2") / "status.json").read_text())
    assert summary["result"] == "INCONCLUSIVE"
    assert "its spec was removed" in summary["reason"]
    assert not run_containers(docker_client, cli.instance, RESOURCE)
    assert cli("evidence", "daemon-2", "--verify").returncode == 0


def test_a_window_waits_for_every_streams_first_frame_before_it_measures(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    """Each stream's decoder starts 8 s after it is registered, longer than the 5 s window: a
    window that measured at once would see no frame and fail the canary. It waits for the first
    frame (up to freshFrameSeconds), as the VSS harness's freshness wait does, then measures."""
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, free_port(), RTVI_EMU_DECODE_DELAY_S="8"),
          canary("late-1", free_port(), streams=1, semanticIsolation=False,
                 performanceSeconds=5, freshFrameSeconds=30))
    done = cli("apply", str(specs), "--timeout", "240", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    known = facts(cli)
    assert (known["phase"], known["result"]) == ("Done", "PASS"), known
    ledger = gate(cli, "late-1", "performance")["evidence"]["ledger"]
    assert (ledger["offered"], ledger["completed"]) == (1, 1), ledger
    report = json.loads((evidence_dir(cli, "late-1") / "evidence/performance.json").read_text())
    assert report["freshWaitSeconds"], report
    assert min(report["freshWaitSeconds"]) > 1, report


def test_canary_latency_is_the_harness_measure_with_transport_and_queueing_in_it(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    """Frames reach the service 2 s after their source stamped them. Measured as the VSS
    harness measures (receive time - media_info.end_timestamp, the default) that delay is in
    every chunk's latency and a 1.5 s maximum fails; the server's own chunk_latency_ms (asked
    for with latencySource: processing_latency) leaves it out."""
    template = rtvi_deployment(emulator_image, free_port(), RTVI_EMU_INGEST_DELAY_S="2")
    for run_id, source in (("ntp-1", "ntp_timestamp"), ("server-1", "processing_latency")):
        specs = tmp_path / f"specs-{run_id}"
        run = canary(run_id, free_port(), streams=1, semanticIsolation=False,
                     performanceSeconds=5, maxP95LatencyMs=1500)
        run["spec"]["measurement"]["latencySource"] = source
        write(specs, template, run)
        cli("apply", str(specs), "--timeout", "240", timeout=300)
        performance = gate(cli, run_id, "performance")
        latency = performance["evidence"]["chunkLatencyMs"]
        assert performance["evidence"]["latencySource"] == source
        if source == "ntp_timestamp":
            assert not performance["passed"], performance
            assert latency["p95"] >= 2000, performance
            assert "p95 chunk latency" in performance["reason"], performance
        else:
            assert performance["passed"], performance
            assert latency["p95"] < 1500, performance
