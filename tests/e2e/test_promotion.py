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

from tests.conftest import TEST_IMAGE_TAG, Cli
from tests.e2e.daemon_helpers import DaemonProcess, condition, events_of, status_of, wait_for
from tests.e2e.promotion_helpers import (
    BAKE_S,
    CAMERAS,
    CAPTIONS,
    DEPLOYMENT,
    QUALIFICATION,
    REPO,
    RESYNC,
    container_of,
    phase_of,
    promoted_spec,
    promotion_of,
    serving,
    small_canary,
)
from tests.e2e.stream_helpers import colours, streamset
from tests.ports import free_port
from tests.registry import Registry
from tests.specs_factory import HOST, write


def test_a_slower_release_is_rejected_and_an_equal_one_promoted_baked_and_rolled_back(
        cli: Cli, registry: Registry, docker_client: docker.DockerClient, emulator_image: str,
        tmp_path: Path) -> None:
    """Releases from a registry: the slower one is 5x slower per chunk (baked into its image,
    not the spec), pulled before anything is measured, qualified beside the running version
    and rejected while that version answers throughout (and its StreamSet goes on against
    it). An equal one is promoted through a kill -9 of the daemon mid-qualification, and
    rolled back when it dies during its bake. The slower one, let through by a person after
    all, is rolled back by its bake too: the StreamSet's caption latency of it is over what
    it read of the version it replaced."""
    fast = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "fast")
    slow = registry.push(docker_client, TEST_IMAGE_TAG, REPO, "slow",
                         env={"RTVI_EMU_LATENCY_PER_STREAM_MS": "220"})
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"

    def spec(digest: str, **env: str) -> None:
        dep = promoted_spec(emulator_image, port, room, BAKE_S, **env)
        dep["spec"]["image"] = f"{registry.address}/{REPO}@{digest}"
        host = {**HOST, "spec": {"docker": "unix:///var/run/docker.sock",
                                 "registries": [registry.login]}}
        write(specs, host, dep, streamset(colours(["RED", "GREEN"]), captions=CAPTIONS),
              host=False)
    cli.extra_env["NGC_API_KEY"] = registry.password
    spec(fast)
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        wait_for("the running version Ready", lambda: (condition(status_of(cli, DEPLOYMENT),
                                                                 "Ready") or {}).get(
            "status") == "True", 120)
        running = container_of(docker_client, cli)
        # Nothing to qualify: the Deployment runs its spec, so its run waits, idle.
        idle = wait_for("the idle qualification", lambda: status_of(cli, QUALIFICATION), 30)
        assert "nothing to qualify" in json.dumps(idle), idle

        # A release 5x slower per chunk: pulled, measured beside the running one, rejected.
        spec(slow)
        asked = wait_for("the slower candidate qualifying", lambda: phase_of(cli, "Qualifying"),
                         120)
        reasons = [e.reason for e in events_of(cli, DEPLOYMENT)]
        assert reasons.index("Pulled") < reasons.index("Qualifying"), reasons
        served: list[bool] = []

        def verdict() -> dict[str, Any] | None:  # the running version answers all along
            served.append(serving(port))
            return phase_of(cli, "Rejected", asked["run"])
        rejected = wait_for("the slower candidate rejected", verdict, 280, interval=0.5)
        assert all(served), f"the running service stopped answering: {served.count(False)}"
        assert container_of(docker_client, cli) == running  # never stopped, never replaced
        assert rejected["reason"].startswith("FAIL: latency: p95"), rejected
        # The StreamSet is not held up by the held candidate: the version it uses serves on.
        wait_for("the StreamSet Ready against the running version", lambda: (condition(
            status_of(cli, CAMERAS), "Ready") or {}).get("status") == "True", 90)
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
                         lambda: phase_of(cli, "Qualifying"), 60)
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
                            lambda: phase_of(cli, "Baking", again["run"]), 280, interval=0.5)
        assert [e.reason for e in events_of(cli, DEPLOYMENT)].count("Promoted") == 1
        runs = sorted(p.name for p in (cli.state_dir / "evidence").iterdir())
        assert runs == sorted([asked["run"], again["run"]]), runs
        assert cli("evidence", again["run"], "--verify").returncode == 0
        assert promoted["promotedFrom"], promoted
        # The switch's gap in service, from the old container's stop to the candidate ready.
        gap = wait_for("the switch's gap recorded", lambda: promotion_of(cli).get("gapSeconds"), 30)
        assert gap > 0
        now = container_of(docker_client, cli)
        assert now[0] != running[0]  # the candidate runs now
        record = status_of(cli, DEPLOYMENT)
        assert record is not None
        assert record["observed_generation"] == record["desired_generation"]
        assert serving(port)

        # The promoted service dies during its bake: the version it replaced comes back.
        httpx.post(f"http://127.0.0.1:{port}/emulator/crash", json={"exit_code": 3}, timeout=5)
        back = wait_for("the rollback", lambda: phase_of(cli, "RolledBack", again["run"]), 120,
                        interval=0.5)
        assert "failed its bake: container exited with code 3" in back["reason"], back
        wait_for("the replaced version serving", lambda: serving(port), 60)
        wait_for("the rollback's pass recorded", lambda: (condition(status_of(
            cli, DEPLOYMENT), "Ready") or {}).get("reason") in ("RolledBack",
                                                               "PromotionRejected"), 60)
        info = docker_client.containers.get(container_of(docker_client, cli)[0])
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

        # A person lets the slower release through after all: its run stands, FAIL, and it
        # is promoted; its bake reads the StreamSet's caption latency of it against what the
        # StreamSet read of the version it replaces, and rolls it back.
        spec(slow)
        wait_for("the slower release held again", lambda: phase_of(cli, "Rejected",
                                                                   asked["run"]), 60)
        approved = cli("promote", "Deployment/vlm", "--approve", asked["run"])
        assert approved.returncode == 0, approved.stdout + approved.stderr
        baking = wait_for("the slower release baking", lambda: phase_of(
            cli, "Baking", asked["run"]), 120, interval=0.5)
        assert baking["liveWatched"] == [str(CAMERAS)], baking
        before = baking["liveBeforeMs"]  # the fast version's 200 ms per chunk
        assert 150 < before < 300, baking
        assert abs(baking["liveLimitMs"] - before * 1.5) < 0.2, baking  # maxP95Regression 50%
        late = wait_for("the rollback on live latency", lambda: phase_of(
            cli, "RolledBack", asked["run"]), 150, interval=0.5)
        assert "failed its bake: caption latency" in late["reason"], late
        assert "StreamSet/cams" in late["reason"], late
        wait_for("the replaced version serving", lambda: serving(port), 60)
    finally:
        daemon.terminate()
    assert registry.password not in daemon.log()


def test_apply_rejects_a_candidate_that_mixes_answers_and_a_person_reruns_then_approves_it(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """``plan`` says ``qualify``; one ``apply`` runs the qualification and, on its verdict,
    holds the candidate: the same candidate is never measured twice unless a person asks
    (``promote --rerun``), and a person may let it through (``promote --approve``). With
    ``baseline: lastAccepted`` the first candidate is measured side by side (nothing promoted
    the running version); the next one is compared with what the run that promoted the
    version it replaces measured, and the running service is not measured at all."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"

    def spec(**env: str) -> dict[str, Any]:
        dep = small_canary(promoted_spec(emulator_image, port, room, 0, **env))
        dep["spec"]["promotion"]["baseline"] = "lastAccepted"
        return dep
    write(specs, spec())
    first = cli("apply", str(specs), "--timeout", "120", timeout=200)
    assert first.returncode == 0, first.stdout + first.stderr
    running = container_of(docker_client, cli)
    write(specs, spec(RTVI_EMU_FAULTS=json.dumps([{"kind": "crosstalk"}])))
    planned = cli("plan", str(specs))
    assert "qualify container" in planned.stdout, planned.stdout
    assert "measured beside the running version first by run vlm-q-" in planned.stdout
    held = cli("apply", str(specs), "--timeout", "280", timeout=320)
    assert held.returncode != 0, held.stdout + held.stderr  # its qualification FAILed
    said = held.stdout + held.stderr
    assert "PromotionRejected" in said, said
    assert "isolation: broken against held" in said, said
    assert container_of(docker_client, cli) == running
    rejected = promotion_of(cli)
    assert rejected["phase"] == "Rejected", rejected
    decided = json.loads((cli.state_dir / "evidence" / rejected["run"] / "decision.json")
                         .read_text())
    assert decided["baseline"]["from"] == "sideBySide", decided["baseline"]
    assert "no accepted qualification of the running version" in decided["baseline"]["why"]
    # Applied again, the same candidate is held at once: its run ran once.
    again = cli("apply", str(specs), "--timeout", "60", timeout=120)
    assert "PromotionRejected" in again.stdout + again.stderr
    assert promotion_of(cli)["since"] == rejected["since"]
    runs = [p.name for p in (cli.state_dir / "evidence").iterdir()
            if p.name.startswith("vlm-q-")]
    assert runs == [rejected["run"]], runs
    # A person asks for it to be measured again: a new run of the same candidate (-r1).
    held_out = cli("promote", "Deployment/vlm", "--rerun")
    assert held_out.returncode == 0, held_out.stdout + held_out.stderr
    rerun = cli("apply", str(specs), "--timeout", "280", timeout=320)
    assert "PromotionRejected" in rerun.stdout + rerun.stderr
    second = promotion_of(cli)
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
    now = promotion_of(cli)
    assert now["phase"] == "Promoted", now
    assert "let through by an operator" in now["reason"], now
    assert container_of(docker_client, cli)[0] != running[0]
    bundle = cli.state_dir / "evidence" / second["run"]
    assert "let through by an operator" in (bundle / "override.json").read_text()
    assert cli("evidence", second["run"], "--verify").returncode == 0
    again = cli("promote", "Deployment/vlm", "--rerun")
    assert again.returncode != 0
    assert "nothing is held out to rerun: its candidate is promoted" in again.stderr
    # The next candidate: its baseline is what run -r1 measured of the version running now.
    write(specs, spec(RTVI_EMU_FAIL_SEED="7"))
    cli("apply", str(specs), "--timeout", "280", timeout=320)
    latest = promotion_of(cli)
    assert latest["run"] not in (rejected["run"], second["run"]), latest
    bundle = cli.state_dir / "evidence" / latest["run"]
    decided = json.loads((bundle / "decision.json").read_text())
    assert decided["baseline"]["from"] == "lastAccepted", decided["baseline"]
    assert decided["baseline"]["run"] == second["run"], decided["baseline"]
    assert (bundle / "runs" / "candidate").is_dir()
    assert not (bundle / "runs" / "baseline").exists()  # the running service: not measured
    assert "Baseline: the running version's numbers from run" in (bundle / "report.md"
                                                                   ).read_text()
    assert cli("evidence", latest["run"], "--verify").returncode == 0
