"""The daemon (`reconciler run`) on a watched folder, against the real Docker engine."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import docker
import httpx
import pytest

from controllers.kinds.deployment.facts import DeploymentStatusFacts
from controllers.kinds.host.facts import HostStatusFacts
from tests.conftest import Cli
from tests.e2e.daemon_helpers import (
    DaemonProcess,
    condition,
    events_of,
    is_ready,
    owned,
    running_ids,
    status_of,
    wait_for,
)
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

RESYNC_NEVER = "3600"  # tests of event-driven repair must not be rescued by a resync


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    write(folder)  # just the Host
    return folder


def _start(cli: Cli, tmp_path: Path, *args: str) -> DaemonProcess:
    daemon = DaemonProcess(cli, list(args), tmp_path / f"daemon-{time.monotonic_ns()}.log")
    daemon.wait_healthy()
    return daemon


def test_saved_spec_is_acted_on_within_a_second_and_drift_is_repaired(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        specs: Path, tmp_path: Path) -> None:
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--resync", RESYNC_NEVER)
    try:
        saved = time.monotonic()
        write(specs, deployment("vlm", pinned(emulator_image), free_port()), name="vlm.yaml",
              host=False)
        wait_for("a container for the new spec", lambda: owned(docker_client, instance), 5)
        assert time.monotonic() - saved < 2.0  # quiet period (0.5 s) + debounce + create
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 30)
        status = status_of(cli, "Deployment/vlm")
        assert status is not None
        assert str(status["applied_revision"]).startswith("sha256:")
        # Strict: what a kind records is exactly its facts model, nothing untyped.
        assert DeploymentStatusFacts.model_validate(status["facts"]).container_id
        host = status_of(cli, "Host/local")
        assert host is not None
        assert host["facts"]["reachable"] is True
        assert HostStatusFacts.model_validate(host["facts"]).engine_version
        assert host["facts"]["gpus"] == "none"
        assert host["facts"]["engineVersion"].startswith("20.")

        # Remove the container by hand: repaired from the Docker event, not a resync.
        [first] = running_ids(docker_client, instance)
        docker_client.containers.get(first).remove(force=True)
        removed = time.monotonic()
        new_ids = wait_for("the container to be recreated",
                           lambda: [i for i in running_ids(docker_client, instance)
                                    if i != first], 10)
        assert time.monotonic() - removed < 5.0
        assert len(new_ids) == 1
        wait_for("Ready again", lambda: is_ready(cli, "Deployment/vlm"), 30)

        # Deleting the spec file of the only Deployment is held (it prunes all we own) until
        # that revision is approved; then it prunes what we created.
        (specs / "vlm.yaml").unlink()
        held = wait_for("the prune to be held", lambda: (status_of(cli, "Source/specs") or {})
                        .get("facts", {}).get("rejectedRevision"), 10)
        assert running_ids(docker_client, instance) == new_ids
        assert cli("sync", "--approve-prune", str(held)).returncode == 0
        wait_for("the container to be pruned", lambda: not owned(docker_client, instance), 10)
        wait_for("the record to be pruned", lambda: status_of(cli, "Deployment/vlm") is None, 5)
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_invalid_revision_keeps_last_good_snapshot(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        specs: Path, tmp_path: Path) -> None:
    port = free_port()
    write(specs, deployment("vlm", pinned(emulator_image), port), name="vlm.yaml", host=False)
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--resync", RESYNC_NEVER)
    try:
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 30)
        [container] = running_ids(docker_client, instance)
        broken = specs / "vlm.yaml"
        broken.write_text(broken.read_text().replace("  host: local", "  host: local\n  bogus: 1"))

        def stalled() -> dict[str, object] | None:
            cond = condition(status_of(cli, "Source/specs"), "Stalled")
            return cond if cond and cond["status"] == "True" else None
        cond = wait_for("the source to report Stalled", stalled, 5)
        assert f"{broken}:" in str(cond["message"])
        assert "spec.bogus: unknown field" in str(
            cond["message"])
        assert running_ids(docker_client, instance) == [container]  # last good state kept
        write(specs, deployment("vlm", pinned(emulator_image), port, env={"X": 1}),
              name="vlm.yaml", host=False)
        wait_for("recovery on the next good revision",
                 lambda: (condition(status_of(cli, "Source/specs"), "Ready") or {}).get(
                     "status") == "True"
                 and running_ids(docker_client, instance) not in ([], [container]), 10)
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 30)
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_backoff_grows_and_a_fix_does_not_wait_it_out(
        cli: Cli, instance: str, emulator_image: str, specs: Path, tmp_path: Path) -> None:
    port = free_port()
    crashing = deployment("vlm", pinned(emulator_image), port,
                          env={"RTVI_EMU_FATAL": "EngineDeadError", "RTVI_EMU_FATAL_AFTER_S": 0})
    write(specs, crashing, name="vlm.yaml", host=False)
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--resync", RESYNC_NEVER)
    try:
        def backoffs() -> list[float] | None:
            delays = [float(e.message.split()[2].rstrip("s"))
                      for e in events_of(cli, "Deployment/vlm") if e.reason == "Backoff"]
            return delays if len(delays) >= 4 else None
        delays = wait_for("four retries", backoffs, 30)
        assert all(b > a for a, b in itertools.pairwise(delays)), delays
        fails = [e for e in events_of(cli, "Deployment/vlm") if e.type == "Warning"]
        assert "EngineDeadError" in fails[0].message
        # The next backoff is several seconds away; a fixed spec must not wait for it.
        write(specs, deployment("vlm", pinned(emulator_image), port), name="vlm.yaml", host=False)
        fixed = time.monotonic()
        wait_for("Ready after the fix", lambda: is_ready(cli, "Deployment/vlm"), 30)
        assert time.monotonic() - fixed < delays[-1] + 5
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_second_daemon_refused_and_kill_9_recovers(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        specs: Path, tmp_path: Path) -> None:
    write(specs, deployment("vlm", pinned(emulator_image), free_port(),
                            env={"RTVI_EMU_STARTUP_DELAY_S": 2}), name="vlm.yaml", host=False)
    first = _start(cli, tmp_path, "--specs", str(specs))
    second = cli("run", "--specs", str(specs), "--metrics-address", "off", timeout=30)
    assert second.returncode == 1
    assert "locked by reconciler pid" in second.stderr
    # Kill -9 mid-reconcile (the service is still "loading"), then start again.
    wait_for("a container", lambda: owned(docker_client, instance), 10)
    assert not is_ready(cli, "Deployment/vlm")
    first.kill9()
    again = _start(cli, tmp_path, "--specs", str(specs))
    try:
        wait_for("Ready after restart", lambda: is_ready(cli, "Deployment/vlm"), 30)
        assert len(owned(docker_client, instance)) == 1
    finally:
        assert again.terminate() == 0, again.log()


def test_metrics_sync_status_live_and_clean_sigterm(
        cli: Cli, instance: str, emulator_image: str, specs: Path, tmp_path: Path) -> None:
    write(specs, deployment("vlm", pinned(emulator_image), free_port()), name="vlm.yaml",
          host=False)
    port = free_port()
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--metrics-address",
                    f"127.0.0.1:{port}")
    try:
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 30)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'rtvi_reconciler_reconcile_duration_seconds_count{kind="Deployment"}' in metrics
        assert "rtvi_reconciler_queue_depth" in metrics
        assert "rtvi_reconciler_queue_processing" in metrics
        calls = [line for line in metrics.splitlines()
                 if line.startswith('rtvi_reconciler_api_calls_total{target="docker:local"}')]
        assert calls
        assert float(calls[0].split()[-1]) > 0
        assert cli("sync").returncode == 0
        live = cli("status", "--live")
        assert live.returncode == 0
        assert "Deployment/vlm" in live.stdout
        assert "revision sha256:" in live.stderr
    finally:
        assert daemon.terminate() == 0, daemon.log()
    assert "reconciler stopped" in daemon.log()
    assert cli("health").returncode == 1  # gone, and says so


def test_a_conflict_is_retried_as_soon_as_the_foreign_container_goes(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        specs: Path, tmp_path: Path) -> None:
    foreign = docker_client.containers.create(emulator_image, name=f"rtvi-{instance}-vlm",
                                              labels={"rtvi.test": "1"})
    write(specs, deployment("vlm", pinned(emulator_image), free_port()), name="vlm.yaml",
          host=False)
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--resync", RESYNC_NEVER)
    try:
        wait_for("a Conflict", lambda: (condition(status_of(cli, "Deployment/vlm"), "Stalled")
                                        or {}).get("reason") == "Conflict", 20)
        foreign.remove()
        wait_for("Ready without waiting for a resync",
                 lambda: is_ready(cli, "Deployment/vlm"), 30)
        assert len(running_ids(docker_client, instance)) == 1
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_a_corrupt_source_record_is_moved_aside_and_the_next_revision_still_applies(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        specs: Path, tmp_path: Path) -> None:
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--resync", RESYNC_NEVER)
    try:
        record = cli.state_dir / "resources" / "Source" / "specs.json"
        wait_for("the Source record", record.is_file, 10)
        record.write_bytes(b"\x00not json")
        write(specs, deployment("vlm", pinned(emulator_image), free_port()), name="vlm.yaml",
              host=False)
        wait_for("a container for the new spec", lambda: owned(docker_client, instance), 10)
        assert len(list(record.parent.glob("specs.json.corrupt-*"))) == 1
        source = status_of(cli, "Source/specs")
        ready = condition(source, "Ready")
        assert ready is not None, source
        assert ready["status"] == "True", source
        assert cli("health").returncode == 0
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_a_record_corrupted_while_running_is_moved_aside_and_the_container_repaired(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        specs: Path, tmp_path: Path) -> None:
    write(specs, deployment("vlm", pinned(emulator_image), free_port()), name="vlm.yaml",
          host=False)
    daemon = _start(cli, tmp_path, "--specs", str(specs), "--resync", RESYNC_NEVER)
    try:
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 30)
        [first] = running_ids(docker_client, instance)
        record = cli.state_dir / "resources" / "Deployment" / "vlm.json"
        record.write_text('{"resource": "Deployment/vlm", "kind": ')  # a hand edit gone wrong
        docker_client.containers.get(first).kill()
        wait_for("the container running again",
                 lambda: running_ids(docker_client, instance), 30)
        wait_for("Ready again", lambda: is_ready(cli, "Deployment/vlm"), 30)
        aside = list(record.parent.glob("vlm.json.corrupt-*"))
        assert len(aside) == 1
        assert aside[0].read_text().endswith('"kind": ')
        [warning] = [e for e in events_of(cli, "Deployment/vlm") if e.reason == "CorruptState"]
        assert str(record) in warning.message
        assert aside[0].name in warning.message
        live = cli("status", "--live")
        assert live.returncode == 0, live.stderr
        assert "Deployment/vlm" in live.stdout, live.stderr
        assert cli("health").returncode == 0
    finally:
        assert daemon.terminate() == 0, daemon.log()
