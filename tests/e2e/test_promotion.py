"""Performance-gated promotion end to end: the daemon on a watched folder, a real Docker engine,
real publishers and decoding, the RTVI emulator as both the running version and its candidates.

A candidate differs from the running version by its environment (the emulator's knobs: slower
per chunk, swapped answers), committed to the watched folder as a person would: the daemon
qualifies it beside the running service, which serves on untouched, and promotes or rejects it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import httpx

from emulators.gpuboard.__main__ import UUID
from state.keys import Key
from tests.conftest import TEST_IMAGE_TAG, Cli
from tests.e2e.daemon_helpers import DaemonProcess, condition, events_of, status_of, wait_for
from tests.e2e.stream_helpers import rtvi_deployment
from tests.ports import free_port
from tests.registry import Registry
from tests.specs_factory import HOST, write

DEPLOYMENT = Key("Deployment", "vlm")
QUALIFICATION = Key("Experiment", "vlm-promotion")
REPO = "vss/rt-vlm"
RESYNC = "3600"  # the verdict wakes the Deployment: no resync needed to move on
BAKE_S = 600  # the promoted service is watched this long (the test crashes it well within)


def _spec(image: str, port: int, room: int, bake_s: int = 0, **env: str) -> dict[str, Any]:
    dep = rtvi_deployment(image, port, **{"RTVI_EMU_LATENCY_MS": "200", **env})
    dep["spec"]["promotion"] = {
        "candidate": {"port": room, "env": {"RTVI_EMU_PORT": str(room)}},
        # The server's own chunk latency: on two cores shared by two services, eight decoders
        # and four publishers, a chunk's receive time moves by hundreds of ms with the load
        # (an equal candidate's p95 was seen 95% above its baseline's), which would decide
        # this test instead of the releases. The slower release is five times slower.
        "gates": {"canary": {"streams": 4, "performanceSeconds": 10, "chunkDurationSeconds": 1,
                             "latencySource": "processing_latency"},
                  "maxP95Regression": "50%"},
        "budgetSeconds": 300, "cleanupSeconds": 30, "bakeSeconds": bake_s}
    return dep


def _promotion(cli: Cli) -> dict[str, Any]:
    record = status_of(cli, DEPLOYMENT)
    found = (record or {}).get("facts", {}).get("promotion")
    return found if isinstance(found, dict) else {}


def _container(client: docker.DockerClient, cli: Cli) -> tuple[str, str]:
    record = status_of(cli, DEPLOYMENT)
    assert record is not None
    info = client.containers.get(record["facts"]["containerId"])
    return info.id, info.attrs["State"]["StartedAt"]


def _serving(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _phase(cli: Cli, phase: str, run_id: str | None = None) -> dict[str, Any] | None:
    found = _promotion(cli)
    if found.get("phase") != phase or (run_id is not None and found.get("run") != run_id):
        return None
    return found


def test_a_slower_release_is_rejected_and_an_equal_one_promoted_baked_and_rolled_back(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        tmp_path: Path) -> None:
    """Releases from a registry: the slower one is 5x slower per chunk (baked into its image,
    not the spec), pulled before anything is measured, qualified beside the running version
    and rejected while that version answers throughout. An equal one is promoted through a
    kill -9 of the daemon mid-qualification, and rolled back when it dies during its bake."""
    fast = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "fast")
    slow = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "slow",
                         env={"RTVI_EMU_LATENCY_PER_STREAM_MS": "220"})
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"

    def spec(digest: str, **env: str) -> None:
        dep = _spec(emulator_image, port, room, BAKE_S, **env)
        dep["spec"]["image"] = f"{registry.address}/{REPO}@{digest}"
        host = {**HOST, "spec": {"docker": "unix:///var/run/docker.sock",
                                 "registries": [registry.login]}}
        write(specs, host, dep, host=False)
    cli.extra_env["NGC_API_KEY"] = registry.password
    spec(fast)
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        wait_for("the running version Ready", lambda: (condition(status_of(cli, DEPLOYMENT),
                                                                 "Ready") or {}).get(
            "status") == "True", 120)
        running = _container(docker_client, cli)
        # Nothing to qualify: the Deployment runs its spec, so its run waits, idle.
        idle = wait_for("the idle qualification", lambda: status_of(cli, QUALIFICATION), 30)
        assert "nothing to qualify" in json.dumps(idle), idle

        # A release 5x slower per chunk: pulled, measured beside the running one, rejected.
        spec(slow)
        asked = wait_for("the slower candidate qualifying", lambda: _phase(cli, "Qualifying"),
                         120)
        reasons = [e.reason for e in events_of(cli, DEPLOYMENT)]
        assert reasons.index("Pulled") < reasons.index("Qualifying"), reasons
        served: list[bool] = []

        def verdict() -> dict[str, Any] | None:  # the running version answers all along
            served.append(_serving(port))
            return _phase(cli, "Rejected", asked["run"])
        rejected = wait_for("the slower candidate rejected", verdict, 280, interval=0.5)
        assert all(served), f"the running service stopped answering: {served.count(False)}"
        assert _container(docker_client, cli) == running  # never stopped, never replaced
        assert rejected["reason"].startswith("FAIL: latency: p95"), rejected
        record = status_of(cli, DEPLOYMENT)
        ready = condition(record, "Ready") or {}
        assert (ready.get("status"), ready.get("reason")) == ("True", "PromotionRejected"), ready
        assert record is not None
        assert record["observed_generation"] != record[
            "desired_generation"]
        assert any(e.reason == "PromotionRejected" for e in events_of(cli, DEPLOYMENT))
        verified = cli("evidence", asked["run"], "--verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        bundle = cli.state_dir / "evidence" / asked["run"]
        decision = json.loads((bundle / "decision.json").read_text())
        assert decision["verdict"] == "reject", decision
        latency = next(g for g in decision["gates"] if g["gate"] == "latency")
        assert latency["verdict"] == "fail", latency
        assert decision["latency"]["test"]["p_value"] < 0.05, decision["latency"]
        for side in ("candidate", "baseline"):
            assert (bundle / "runs" / side / "evidence" / "semantic-isolation.json").is_file()
        assert "| latency |" in (bundle / "report.md").read_text()

        # A candidate that measures up (the running version's speed, one more variable).
        spec(fast, RTVI_EMU_FAIL_SEED="7")
        again = wait_for("the equal candidate qualifying",
                         lambda: _phase(cli, "Qualifying"), 60)
        assert again["run"] != asked["run"]  # a new commit is a new candidate
        # kill -9 mid-qualification: the run is a job on the Host and goes on; the next
        # daemon follows it, and the decision is made once.
        wait_for("the qualification running", lambda: (status_of(cli, QUALIFICATION) or {})
                 .get("facts", {}).get("phase") == "Running", 60)
        daemon.kill9()
        daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC],
                               tmp_path / "daemon-2.log")
        daemon.wait_healthy()
        promoted = wait_for("the equal candidate promoted, baking",
                            lambda: _phase(cli, "Baking", again["run"]), 280, interval=0.5)
        assert [e.reason for e in events_of(cli, DEPLOYMENT)].count("Promoted") == 1
        runs = sorted(p.name for p in (cli.state_dir / "evidence").iterdir())
        assert runs == sorted([asked["run"], again["run"]]), runs
        assert cli("evidence", again["run"], "--verify").returncode == 0
        assert promoted["promotedFrom"], promoted
        # The switch's gap in service, from the old container's stop to the candidate ready.
        gap = wait_for("the switch's gap recorded", lambda: _promotion(cli).get("gapSeconds"), 30)
        assert gap > 0
        now = _container(docker_client, cli)
        assert now[0] != running[0]  # the candidate runs now
        record = status_of(cli, DEPLOYMENT)
        assert record is not None
        assert record["observed_generation"] == record["desired_generation"]
        assert _serving(port)

        # The promoted service dies during its bake: the version it replaced comes back.
        httpx.post(f"http://127.0.0.1:{port}/emulator/crash", json={"exit_code": 3}, timeout=5)
        back = wait_for("the rollback", lambda: _phase(cli, "RolledBack", again["run"]), 120,
                        interval=0.5)
        assert "failed its bake: container exited with code 3" in back["reason"], back
        wait_for("the replaced version serving", lambda: _serving(port), 60)
        wait_for("the rollback's pass recorded", lambda: (condition(status_of(
            cli, DEPLOYMENT), "Ready") or {}).get("reason") in ("RolledBack",
                                                               "PromotionRejected"), 60)
        info = docker_client.containers.get(_container(docker_client, cli)[0])
        assert not any(e.startswith("RTVI_EMU_FAIL_SEED=") for e in info.attrs["Config"]["Env"])
        record = status_of(cli, DEPLOYMENT)
        assert record is not None
        assert record["observed_generation"] != record["desired_generation"]
        assert any(e.reason == "RolledBack" for e in events_of(cli, DEPLOYMENT))
        # ... and the candidate stays out: nothing promotes it again.
        held = wait_for("the rolled-back candidate held", lambda: (condition(status_of(
            cli, DEPLOYMENT), "Ready") or {}).get("reason") == "PromotionRejected", 30)
        assert held
        assert [e.reason for e in events_of(cli, DEPLOYMENT)].count("Promoted") == 1
    finally:
        daemon.terminate()
    assert registry.password not in daemon.log()


def test_apply_rejects_a_candidate_that_mixes_answers_and_a_person_reruns_then_approves_it(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """``plan`` says ``qualify``; one ``apply`` runs the qualification and, on its verdict,
    holds the candidate: the same candidate is never measured twice unless a person asks
    (``promote --rerun``), and a person may let it through (``promote --approve``)."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"
    write(specs, _spec(emulator_image, port, room))
    first = cli("apply", str(specs), "--timeout", "120", timeout=200)
    assert first.returncode == 0, first.stdout + first.stderr
    running = _container(docker_client, cli)
    write(specs, _spec(emulator_image, port, room,
                       RTVI_EMU_FAULTS=json.dumps([{"kind": "crosstalk"}])))
    planned = cli("plan", str(specs))
    assert "qualify container" in planned.stdout, planned.stdout
    assert "measured beside the running version first by run vlm-q-" in planned.stdout
    held = cli("apply", str(specs), "--timeout", "280", timeout=320)
    assert held.returncode != 0, held.stdout + held.stderr  # its qualification FAILed
    said = held.stdout + held.stderr
    assert "PromotionRejected" in said, said
    assert "isolation: broken against held" in said, said
    assert _container(docker_client, cli) == running
    rejected = _promotion(cli)
    assert rejected["phase"] == "Rejected", rejected
    # Applied again, the same candidate is held at once: its run ran once.
    again = cli("apply", str(specs), "--timeout", "60", timeout=120)
    assert "PromotionRejected" in again.stdout + again.stderr
    assert _promotion(cli)["since"] == rejected["since"]
    runs = [p.name for p in (cli.state_dir / "evidence").iterdir()
            if p.name.startswith("vlm-q-")]
    assert runs == [rejected["run"]], runs
    # A person asks for it to be measured again: a new run of the same candidate (-r1).
    held_out = cli("promote", "Deployment/vlm", "--rerun")
    assert held_out.returncode == 0, held_out.stdout + held_out.stderr
    rerun = cli("apply", str(specs), "--timeout", "280", timeout=320)
    assert "PromotionRejected" in rerun.stdout + rerun.stderr
    second = _promotion(cli)
    assert second["run"] == f"{rejected['run']}-r1", second
    # ... and lets it through: the candidate replaces the running version, and its bundle
    # keeps the measured FAIL with the override beside it, sealed again.
    refused = cli("promote", "Deployment/vlm", "--approve", rejected["run"])
    assert refused.returncode != 0
    assert f"is not the held candidate's: that is {second['run']}" in refused.stderr
    approved = cli("promote", "Deployment/vlm", "--approve", second["run"])
    assert approved.returncode == 0, approved.stdout + approved.stderr
    promoted = cli("apply", str(specs), "--timeout", "120", timeout=200)
    assert promoted.returncode != 0  # the qualification's own verdict stays FAIL
    now = _promotion(cli)
    assert now["phase"] == "Promoted", now
    assert "let through by an operator" in now["reason"], now
    assert _container(docker_client, cli)[0] != running[0]
    bundle = cli.state_dir / "evidence" / second["run"]
    assert "let through by an operator" in (bundle / "override.json").read_text()
    assert cli("evidence", second["run"], "--verify").returncode == 0
    again = cli("promote", "Deployment/vlm", "--rerun")
    assert again.returncode != 0
    assert "nothing is held out to rerun: its candidate is promoted" in again.stderr


def test_a_candidate_that_leaks_gpu_memory_is_rejected_naming_the_leak(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient, gpu_board: str,
        tmp_path: Path) -> None:
    """On an emulated GPU both versions allocate on: the candidate keeps 2048 MiB after it
    stops, over the 512 allowed, and the running version is left serving."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"
    board = {"RTVI_EMU_GPU_BOARD": gpu_board, "RTVI_EMU_GPU_MIB": "16000"}

    def spec(**env: str) -> dict[str, Any]:
        dep = _spec(emulator_image, port, room, 0, **board, **env)
        dep["spec"]["promotion"]["candidate"]["telemetry"] = {
            "dcgmUrl": f"{gpu_board}/metrics", "required": True, "gpus": [UUID],
            "intervalSeconds": 0.5}
        return dep
    write(specs, spec())
    assert cli("apply", str(specs), "--timeout", "120", timeout=200).returncode == 0
    running = _container(docker_client, cli)
    write(specs, spec(RTVI_EMU_GPU_LEAK_MIB="2048"))
    held = cli("apply", str(specs), "--timeout", "280", timeout=320)
    said = held.stdout + held.stderr
    assert "PromotionRejected" in said, said
    assert "GPU memory: 2048 MiB against not measured" in said, said
    assert _container(docker_client, cli) == running
    bundle = cli.state_dir / "evidence" / _promotion(cli)["run"]
    gate = json.loads((bundle / "gates" / "gpu-memory.json").read_text())
    assert (gate["passed"], gate["evidence"]["candidate"]) == (False, "2048 MiB"), gate


def test_a_candidate_that_holds_fewer_streams_is_rejected_naming_capacity(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """The capacity gate: the candidate admits two streams where the running version admits
    three. Each is searched in the room in turn (the running version as a fresh copy of its
    recorded spec), never the running service itself, which serves on untouched."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"

    def spec(**env: str) -> dict[str, Any]:
        dep = _spec(emulator_image, port, room, 0, **env)
        gates = dep["spec"]["promotion"]["gates"]
        gates["canary"].update(streams=2, performanceSeconds=5)
        gates["capacity"] = {"initialStreamCount": 2, "maxStreamCount": 3, "windowSeconds": 5,
                             "maxP95LatencyMs": 5000, "chunkDurationSeconds": 1}
        return dep
    write(specs, spec())
    assert cli("apply", str(specs), "--timeout", "120", timeout=200).returncode == 0
    running = _container(docker_client, cli)
    write(specs, spec(RTVI_EMU_MAX_STREAMS="2"))
    planned = cli("plan", str(specs))
    assert "at most 0 stream(s) of capacity lost" in planned.stdout, planned.stdout
    held = cli("apply", str(specs), "--timeout", "280", timeout=320)
    said = held.stdout + held.stderr
    assert "PromotionRejected" in said, said
    assert "capacity: 2 streams against 3 streams (at most 0 fewer streams)" in said, said
    assert _container(docker_client, cli) == running
    assert _serving(port)
    bundle = cli.state_dir / "evidence" / _promotion(cli)["run"]
    for side, highest in (("candidate", 2), ("baseline", 3)):
        searched = json.loads((bundle / "runs" / side / "evidence" / "capacity.json")
                              .read_text())
        assert searched["highestStable"] == highest, searched
    report = (bundle / "report.md").read_text()
    assert "| candidate | 2 | 3 |" in report, report
    # A fresh service per window: the candidate's (after the canary's), then the running
    # version's copies, named apart; the running service was never one of them.
    events = [json.loads(line) for line in (bundle / "events.jsonl").read_text().splitlines()]
    ready = [e["message"] for e in events if e.get("reason") == "ServiceReady"]
    assert len(ready) == 5, ready  # the canary's candidate, 2 windows each side
    assert [("baseline-" in m) for m in ready] == [False] * 3 + [True] * 2, ready
    assert not any(running[0] in json.dumps(e) for e in events)
    assert cli("evidence", _promotion(cli)["run"], "--verify").returncode == 0
