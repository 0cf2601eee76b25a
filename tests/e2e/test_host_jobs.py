"""Runs as jobs on their Host (``executor: host``, issue 27): real Docker, the runner image,
the emulator as the service, real publishers and decoding."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import docker

from controllers.kinds.experiments.runner.hostjob import LABEL_ROLE, ROLE_RUNNER
from controllers.ownership import LABEL_INSTANCE, LABEL_RUN_ID
from state.evidence import verify
from tests.conftest import Cli, containers_of
from tests.e2e.daemon_helpers import DaemonProcess, run_containers, status_of, wait_for
from tests.e2e.stream_helpers import rtvi_deployment
from tests.e2e.test_benchmark import (  # noqa: F401
    bench,
    harness_config,
    media_fixture,
    pinned,
    rtsp_fixture,
)
from tests.e2e.test_port_validation import port_spec
from tests.emulators.rtsp_source import RtspSource
from tests.ports import free_port
from tests.remote_engine import (  # noqa: F401
    RemoteEngine,
    remote_engine_fixture,
    remote_fixture,
)
from tests.specs_factory import write

RESOURCE = "Experiment/canary"


def canary_job(run_id: str, port: int, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "canary"},
            "spec": {"type": "canary", "runId": run_id, "template": "vlm", "executor": "host",
                     "service": {"hostPort": port, "env": {"RTVI_EMU_PORT": str(port)}},
                     "measurement": {"claim": "streams are isolated and drop no chunk"},
                     "budgetSeconds": 300, "cleanupSeconds": 20,
                     "canary": {"streams": 2, "chunkDurationSeconds": 1,
                                "performanceSeconds": 5, "freshFrameSeconds": 15}, **spec}}


def measured(run_id: str, seconds: int, streams: int = 2) -> dict[str, Any]:
    """A canary job whose measurement lasts ``seconds``: long enough to act on it mid-run."""
    body = {"streams": streams, "chunkDurationSeconds": 1, "performanceSeconds": seconds,
            "freshFrameSeconds": 15}
    return canary_job(run_id, free_port(), canary=body if streams > 1 else {
        **body, "semanticIsolation": False})  # isolation needs two streams


def daemon_for(cli: Cli, specs: Path, log: Path) -> DaemonProcess:
    return DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"], log)


def wait_measuring(cli: Cli, timeout: float = 180) -> None:
    """Until the job's measurement shows in this reconciler's record (mirrored from it)."""
    wait_for("the job's measurement, mirrored into the record", lambda: "performance" in str(
        (status_of(cli, RESOURCE) or {}).get("conditions")), timeout, 0.2)


def wait_verdict(cli: Cli, what: str, timeout: float) -> str:
    def verdict() -> str | None:
        facts = (status_of(cli, RESOURCE) or {}).get("facts", {})
        return str(facts["result"]) if facts.get("result") else None
    return wait_for(what, verdict, timeout)


def with_token(emulator_image: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """The emulator as the template, enforcing a bearer token that is a secret of the spec: a
    job that did not get the secret's value could not talk to its service."""
    token = "canary-token-" + secrets.token_hex(12)
    token_file = tmp_path / "rtvi_token"
    token_file.write_text(token + "\n")
    template = rtvi_deployment(emulator_image, free_port())
    template["spec"]["secrets"] = [{"name": "RTVI_EMU_API_TOKEN", "fromFile": str(token_file)}]
    template["spec"]["apiTokenSecret"] = "RTVI_EMU_API_TOKEN"
    return template, token


def state_bytes(cli: Cli) -> bytes:
    """Every file of the state directory: records, the log, the evidence brought home."""
    return b"".join(p.read_bytes() for p in sorted(cli.state_dir.rglob("*")) if p.is_file())


def runners(client: docker.DockerClient, instance: str) -> list[Any]:
    return containers_of(client, instance, f"{LABEL_ROLE}={ROLE_RUNNER}")


def test_a_canary_runs_as_a_job_on_its_host_and_its_bundle_comes_home_verified(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    template, token = with_token(emulator_image, tmp_path)
    write(specs, template, canary_job("job-1", free_port()))
    planned = cli("plan", str(specs))
    assert "executes as a job on Host local, outliving the reconciler" in planned.stdout, \
        planned.stdout + planned.stderr
    done = cli("apply", str(specs), "--timeout", "300", timeout=360)
    assert done.returncode == 0, done.stdout + done.stderr
    record = status_of(cli, RESOURCE)
    assert record is not None
    facts = record["facts"]
    assert facts["result"] == "PASS", facts
    assert facts["runner"].endswith("run-job-1"), facts
    folder = cli.state_dir / "evidence" / "job-1"
    assert verify(folder) == [], verify(folder)
    events = (folder / "events.jsonl").read_text()
    assert "Launched" in events
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["code"]["revision"] not in ("", "unknown"), manifest["code"]
    assert cli("evidence", "job-1", "--verify").returncode == 0
    runner_log = (folder / "logs" / "runner.log").read_text()  # sealed with the bundle
    assert '"runner.progress"' in runner_log, runner_log[-2000:]
    assert not runners(docker_client, cli.instance)  # the runner is removed once home
    assert not docker_client.volumes.list(filters={"label": f"{LABEL_INSTANCE}={cli.instance}"})
    assert token not in planned.stdout + done.stdout + done.stderr
    assert token.encode() not in state_bytes(cli)


def test_kill_9_or_sigterm_of_the_daemon_mid_run_leaves_the_job_running_and_it_attaches(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path) -> None:
    """On the SSH Host: the daemon killed mid-measurement, restarted, stopped cleanly and
    restarted again; the one run goes on there and ends PASS with a verified bundle."""
    specs = tmp_path / "specs"
    template, token = with_token(emulator_image, tmp_path)
    on_edge(remote, template, measured("job-k9", 25, streams=1), specs)
    docker_client = remote.client
    first = daemon_for(cli, specs, tmp_path / "daemon1.log")
    try:
        wait_measuring(cli, 240)
    finally:
        first.kill9()
    (runner,) = runners(docker_client, cli.instance)
    assert runner.status == "running"  # the run outlives the reconciler
    seen = json.dumps(runner.attrs) + runner.logs().decode("utf-8", "replace")
    assert token not in seen  # not in its plan, environment, command, labels or log
    shown = cli("status", RESOURCE).stdout  # where it runs, and when it was last seen
    assert f"runner: {runner.name}" in shown, shown
    assert "reportedAt: 20" in shown, shown
    assert "followedAt: 20" in shown, shown
    log = cli.state_dir / "reconciler.log"
    second = daemon_for(cli, specs, tmp_path / "daemon2.log")
    try:
        wait_for("the restarted daemon to attach", lambda: '"experiment.job_attached"' in
                 log.read_text(), 60, 0.2)
    finally:
        assert second.terminate() == 0, second.log()  # SIGTERM: a clean shutdown
    runner.reload()
    assert runner.status == "running"  # a clean shutdown leaves it running too
    third = daemon_for(cli, specs, tmp_path / "daemon3.log")
    try:
        assert wait_verdict(cli, "the verdict after the restarts", 240) == "PASS", \
            status_of(cli, RESOURCE)
    finally:
        assert third.terminate() == 0, third.log()
    logged = log.read_text()
    assert logged.count('"experiment.job_started"') == 1, logged[-3000:]
    assert logged.count('"experiment.job_attached"') >= 2, logged[-3000:]  # each restart
    folder = cli.state_dir / "evidence" / "job-k9"
    assert verify(folder) == []
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in events].count("Launched") == 1, events  # one run, never two
    assert token.encode() not in state_bytes(cli)
    assert not runners(docker_client, cli.instance)


def test_a_run_launched_but_never_started_is_started_by_the_next_holder(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """Issue 38: a run whose launch was recorded but whose job was never created (the board's
    two workers busy; then the daemon is killed, as a replica losing its Host would be) ended
    INCONCLUSIVE though nothing of it ran. The next holder starts it, once."""
    specs = tmp_path / "specs"
    names = ("canary-a", "canary-b", "canary-c")
    runs = [{**measured(f"hand-{n[-1]}", 8, streams=1), "metadata": {"name": n}}
            for n in names]
    write(specs, rtvi_deployment(emulator_image, free_port()), *runs)
    first = daemon_for(cli, specs, tmp_path / "daemon1.log")
    try:
        def one_queued() -> str | None:
            facts = {n: (status_of(cli, f"Experiment/{n}") or {}).get("facts", {})
                     for n in names}
            if not all(f.get("runId") for f in facts.values()):
                return None
            if len([r for r in runners(docker_client, cli.instance)
                    if r.status == "running"]) < 2:  # started, not only created
                return None
            queued = [n for n, f in facts.items() if not f.get("runnerClaimedAt")]
            return queued[0] if len(queued) == 1 else None
        queued = wait_for("two jobs running and one run launched behind them", one_queued, 120,
                          0.2)
    finally:
        first.kill9()
    run_id = f"hand-{queued[-1]}"
    assert len(runners(docker_client, cli.instance)) == 2  # its job was never created
    second = daemon_for(cli, specs, tmp_path / "daemon2.log")
    try:
        def verdicts() -> dict[str, str] | None:
            found = {n: str((status_of(cli, f"Experiment/{n}") or {}).get("facts", {}).get(
                "result") or "") for n in names}
            return found if all(found.values()) else None
        ended = wait_for("every verdict", verdicts, 300)
    finally:
        assert second.terminate() == 0, second.log()
    assert ended == dict.fromkeys(names, "PASS"), (ended, status_of(cli, f"Experiment/{queued}"))
    logged = (cli.state_dir / "reconciler.log").read_text()
    assert logged.count('"experiment.start_launched"') == 1, logged[-3000:]
    folder = cli.state_dir / "evidence" / run_id
    assert verify(folder) == []
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert [e["reason"] for e in events].count("Launched") == 1, events
    assert not runners(docker_client, cli.instance)


def test_a_runner_killed_mid_run_ends_inconclusive_with_its_cleanup_proven(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    on_edge(remote, rtvi_deployment(emulator_image, free_port()),
            measured("job-dead", 30, streams=1), specs)
    docker_client = remote.client
    daemon = daemon_for(cli, specs, tmp_path / "daemon.log")
    try:
        wait_measuring(cli, 240)
        (runner,) = runners(docker_client, cli.instance)
        runner.kill()
        assert wait_verdict(cli, "the verdict after the runner died", 120) == "INCONCLUSIVE"
    finally:
        assert daemon.terminate() == 0, daemon.log()
    facts = (status_of(cli, RESOURCE) or {})["facts"]
    assert "exited 137 without a verdict" in facts["reason"], facts
    folder = cli.state_dir / "evidence" / "job-dead"
    cleanup = json.loads((folder / "gates" / "cleanup.json").read_text())
    assert cleanup["passed"], cleanup
    assert verify(folder) == []
    assert not run_containers(docker_client, cli.instance, RESOURCE)  # service, publishers
    assert not runners(docker_client, cli.instance)
    assert not docker_client.volumes.list(filters={"label": f"{LABEL_INSTANCE}={cli.instance}"})


def test_a_job_whose_budget_runs_out_ends_itself_on_its_host_with_no_reconciler(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    # 60 s measured in a 70 s budget with 10 s of it for cleanup: the service's start and the
    # first fresh frames do not fit as well, so the budget runs out mid-measurement.
    job = measured("job-budget", 60)
    job["spec"].update(budgetSeconds=70, cleanupSeconds=10)
    write(specs, rtvi_deployment(emulator_image, free_port()), job)
    first = daemon_for(cli, specs, tmp_path / "daemon1.log")
    try:
        wait_measuring(cli)
    finally:
        first.kill9()  # no reconciler from here on until the run has ended
    (runner,) = runners(docker_client, cli.instance)
    assert runner.wait(timeout=150)["StatusCode"] == 0  # 0: it reached a verdict itself
    left = [c.name for c in run_containers(docker_client, cli.instance, RESOURCE)
            if c.labels.get(LABEL_ROLE) != ROLE_RUNNER]
    assert left == []  # its service and publishers: cleaned up on the Host, by the run
    second = daemon_for(cli, specs, tmp_path / "daemon2.log")
    try:
        assert wait_verdict(cli, "the job's own verdict, brought home", 120) == "INCONCLUSIVE"
    finally:
        assert second.terminate() == 0, second.log()
    facts = (status_of(cli, RESOURCE) or {})["facts"]
    assert "its budget of 70s ran out (10s of it kept for cleanup)" in facts["reason"], facts
    folder = cli.state_dir / "evidence" / "job-budget"
    assert json.loads((folder / "gates" / "cleanup.json").read_text())["passed"]
    assert '"runner.stopped"' in (folder / "logs" / "runner.log").read_text()  # why, sealed
    assert verify(folder) == []
    assert not runners(docker_client, cli.instance)


def test_a_canary_job_on_an_ssh_host_runs_through_a_lost_connection(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    # One stream: the lost connection is the point, not isolation (the far engine publishes
    # through its userland proxy, and a loaded CI runner starved two streams' answers once).
    template = rtvi_deployment(emulator_image, free_port())
    template["spec"]["host"] = "edge"
    # 25 s of measurement: the record shows it (mirrored from the job's status each second)
    # and sshd goes down while the runner still runs, even on a loaded runner (with 10 s a
    # fresh-clone run once finished the job before the test saw it measuring).
    write(specs, remote.host_document("edge"), template,
          measured("job-ssh", 25, streams=1))
    daemon = daemon_for(cli, specs, tmp_path / "daemon.log")
    try:
        wait_measuring(cli, 240)
        remote.stop_sshd()
        try:
            (runner,) = runners(remote.client, cli.instance)  # on the far engine itself
            assert runner.status == "running"
            assert runner.labels[LABEL_RUN_ID] == "job-ssh"
            gone = wait_for("the connection loss noticed", lambda: "experiment.job_unreachable"
                            in (cli.state_dir / "reconciler.log").read_text(), 30)
            assert gone
        finally:
            remote.start_sshd()
        assert wait_verdict(cli, "the verdict once SSH is back", 180) == "PASS", \
            status_of(cli, RESOURCE)
    finally:
        assert daemon.terminate() == 0, daemon.log()
    folder = cli.state_dir / "evidence" / "job-ssh"
    assert verify(folder) == []
    assert cli("evidence", "job-ssh", "--verify").returncode == 0
    assert not runners(remote.client, cli.instance)


def test_removing_the_spec_mid_run_stops_the_job_and_cleans_up(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    template = rtvi_deployment(emulator_image, free_port())
    on_edge(remote, template, measured("job-gone", 60, streams=1), specs)
    docker_client = remote.client
    daemon = daemon_for(cli, specs, tmp_path / "daemon.log")
    try:
        wait_measuring(cli, 240)
        write(specs, remote.host_document("edge"), template)
        wait_for("the Experiment to be pruned", lambda: status_of(cli, RESOURCE) is None, 120,
                 0.2)
    finally:
        assert daemon.terminate() == 0, daemon.log()
    folder = cli.state_dir / "evidence" / "job-gone"
    summary = json.loads((folder / "status.json").read_text())
    assert summary["result"] == "INCONCLUSIVE", summary
    assert "its spec was removed" in summary["reason"], summary
    assert json.loads((folder / "gates" / "cleanup.json").read_text())["passed"]
    assert verify(folder) == []
    assert not run_containers(docker_client, cli.instance, RESOURCE)
    assert not runners(docker_client, cli.instance)
    assert not docker_client.volumes.list(filters={"label": f"{LABEL_INSTANCE}={cli.instance}"})


def on_edge(remote: RemoteEngine, template: dict[str, Any], run: dict[str, Any],
            specs: Path) -> None:
    """``run`` as a job on the SSH Host ``edge``, with ``template`` there."""
    template["spec"]["host"] = "edge"
    run["spec"]["executor"] = "host"
    write(specs, remote.host_document("edge"), template, run)


def left_on(client: docker.DockerClient, instance: str) -> list[str]:
    """Containers of this instance's runs (service, publishers, harness, runner) still there
    (the template's own Deployment is not a run's)."""
    return [c.name for c in containers_of(client, instance, LABEL_RUN_ID)]


def test_a_port_validation_runs_as_a_job_on_an_ssh_host_reading_its_media_there(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    on_edge(remote, rtvi_deployment(emulator_image, free_port()),
            port_spec(tmp_path, "job-port", free_port()), specs)
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = (status_of(cli, "Experiment/port") or {})["facts"]
    assert facts["result"] == "PASS", facts
    assert facts["runner"].endswith("run-job-port"), facts
    folder = cli.state_dir / "evidence" / "job-port"
    found = json.loads((folder / "evidence" / "port-validation.json").read_text())
    smoke = {row["name"]: row for row in found["smoke"]}
    # The runner read the pinned media on the Host (read-only binds at the same paths) and
    # the service decoded them: the answers name what the files show.
    assert "red" in smoke["image"]["answer"].lower(), smoke
    assert "blue" in smoke["video"]["answer"].lower(), smoke
    assert found["accuracy"]["correct"] == found["accuracy"]["total"] == 3, found["accuracy"]
    assert verify(folder) == []
    assert not left_on(remote.client, cli.instance)


def test_a_benchmark_runs_as_a_job_on_an_ssh_host_with_the_harness_from_its_checkout(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path,
        rtsp: RtspSource, media: Path) -> None:
    specs = tmp_path / "specs"
    config = harness_config(tmp_path, rtsp, media)
    template = rtvi_deployment(emulator_image, free_port())
    template["spec"]["mounts"] = [{"source": str(media), "target": str(media)}]
    on_edge(remote, template, bench("job-bench", free_port(), config, concurrencyLevels=[1, 2],
                                    smoke=True, smokeClip=pinned(media / "clip.mp4")), specs)
    planned = cli("plan", str(specs))  # not refused on a remote Host: it runs there
    assert planned.returncode == 2, planned.stdout + planned.stderr  # changes, no error
    assert "executes as a job on Host edge" in planned.stdout, planned.stdout
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = (status_of(cli, "Experiment/bench") or {})["facts"]
    assert facts["result"] == "PASS", facts
    assert set(facts["gates"]) == {"scenario", "service-environment", "smoke", "harness",
                                   "cleanup"}, facts
    folder = cli.state_dir / "evidence" / "job-bench"
    assert verify(folder) == []
    found = json.loads((folder / "evidence" / "benchmark.json").read_text())
    assert found["result"]["summary"]["overall_status"] == "PASS", found["result"]
    assert [lv["concurrency"] for lv in found["fileBurst"]["levels"]] == [1, 2]
    # The three run handles were paths in the job; at home they are found in the bundle.
    inside = found["handlesInBundle"]
    assert inside == {"config": "output/config/rtvi_vlm_perf_config.yaml",
                      "report": "output/report", "log": "logs/harness.log"}, found["handles"]
    log = (folder / inside["log"]).read_text()
    assert "Scenario 'file_burst_1_token' completed successfully!" in log, log[-2000:]
    assert (folder / inside["config"]).is_file()
    assert (folder / inside["report"]).is_dir()
    assert "(in the bundle: `logs/harness.log`)" in (folder / "report.md").read_text()
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    (started,) = [e for e in events if e["reason"] == "HarnessStarted"]
    # The harness ran on the Host in a container of the run (the Host's own interpreter,
    # virtual environment and checkout, read-only), not as a process beside the reconciler.
    assert started["process"].endswith("-harness-run"), started
    cleanup = json.loads((folder / "gates" / "cleanup.json").read_text())
    assert cleanup["passed"], cleanup
    assert not left_on(remote.client, cli.instance)  # service, harness, runner: all removed


def test_a_capacity_search_runs_as_a_job_on_an_ssh_host(
        cli: Cli, emulator_image: str, remote: RemoteEngine, tmp_path: Path) -> None:
    """Every type on the SSH Host: a capacity search's windows, each with a fresh service
    started and removed there by the job, end to end (the emulator breaches above 1 stream)."""
    port = free_port()
    search = {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
              "metadata": {"name": "cap"},
              "spec": {"type": "capacity", "runId": "job-cap", "template": "vlm",
                       "service": {"hostPort": port, "env": {
                           "RTVI_EMU_PORT": str(port), "RTVI_EMU_BREACH_ABOVE": "1",
                           "RTVI_EMU_BREACH_MS": "2500"}},
                       "measurement": {"claim": "the highest stable live-stream count"},
                       "budgetSeconds": 300, "cleanupSeconds": 10,
                       "capacity": {"initialStreamCount": 1, "addStreamCount": 1,
                                    "maxStreamCount": 2, "windowSeconds": 5,
                                    "maxP95LatencyMs": 2000.0, "chunkDurationSeconds": 1}}}
    specs = tmp_path / "specs"
    on_edge(remote, rtvi_deployment(emulator_image, free_port()), search, specs)
    done = cli("apply", str(specs), "--timeout", "250", timeout=320)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = (status_of(cli, "Experiment/cap") or {})["facts"]
    assert facts["result"] == "PASS", facts
    assert "highest stable 1, first unstable 2" in facts["reason"], facts
    assert facts["runner"].endswith("run-job-cap"), facts
    folder = cli.state_dir / "evidence" / "job-cap"
    windows = [json.loads(p.read_text()) for p in sorted(
        (folder / "evidence" / "capacity").rglob("w*.json"))]
    assert [w["verdict"] for w in windows] == ["stable", "unstable"], windows
    logs = [p.name for p in (folder / "logs").iterdir() if "-w" in p.name]
    assert len(logs) == 2, logs  # a fresh service per window, its log kept
    assert verify(folder) == []
    assert not left_on(remote.client, cli.instance)
