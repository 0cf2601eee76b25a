"""Ports and pauses through the real CLI and a real engine (issue 9, findings 4 and 6).

- A container port the image does not EXPOSE is published and answers.
- A host port someone else holds (a listening socket, another container) is a plan error
  naming the port and the holder; our own running container is never in its own way.
- A paused container is not Ready: Degraded, reason Paused, with how to resume; it is neither
  unpaused nor replaced.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

from specs.rules import R_PORT_FREE
from tests.conftest import Cli, containers_of
from tests.e2e.daemon_helpers import DaemonProcess, events_of, is_ready, status_of, wait_for
from tests.e2e.stream_helpers import rtvi_deployment
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

UNEXPOSED_PORT = 19101  # the emulator image EXPOSEs 8000 only
HEALTHY_TIMEOUT_S = 60


@retry(stop=stop_after_delay(HEALTHY_TIMEOUT_S), wait=wait_fixed(0.2),
       retry=retry_if_result(lambda health: health != "healthy"))
def _wait_healthy(container: Container) -> str:
    container.reload()
    return str(container.attrs["State"].get("Health", {}).get("Status"))


def _status(cli: Cli, name: str) -> dict[str, object]:
    done = cli("status", name, "-o", "json")
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def _condition(status: dict[str, object], kind: str) -> dict[str, str]:
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    return next(c for c in conditions if c["type"] == kind)


def test_container_port_the_image_does_not_expose_is_published(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs, port = tmp_path / "specs", free_port()
    spec = deployment("vlm", pinned(emulator_image), port, env={"RTVI_EMU_PORT": UNEXPOSED_PORT})
    spec["spec"]["port"]["container"] = UNEXPOSED_PORT
    write(specs, spec)
    done = cli("apply", str(specs), "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr  # Ready: it answered on the port
    [container] = containers_of(docker_client, instance)
    bindings = container.attrs["HostConfig"]["PortBindings"][f"{UNEXPOSED_PORT}/tcp"]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    assert container.ports[f"{UNEXPOSED_PORT}/tcp"][0]["HostPort"] == str(port)


def test_port_held_by_a_listening_socket_is_a_plan_error(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        path = write(specs, deployment("vlm", pinned(emulator_image), port))
        for verb in ("plan", "apply"):
            done = cli(verb, str(specs))
            text = done.stdout + done.stderr
            assert done.returncode == 1, text
            assert f"host port {port} is taken on Host local" in text
            assert f"a process on the Host listens on 127.0.0.1:{port}" in text
            assert R_PORT_FREE in text
            assert f"{path}:" in text
            assert "spec.port.host" in text
    assert containers_of(docker_client, instance) == []


def test_port_published_by_another_container_is_a_plan_error_but_not_our_own(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs, port = tmp_path / "specs", free_port()
    write(specs, deployment("first", pinned(emulator_image), port))
    assert cli("apply", str(specs)).returncode == 0
    assert cli("plan", str(specs)).returncode == 0  # our own container is not in its own way

    others = tmp_path / "others"
    write(others, deployment("second", pinned(emulator_image), port))
    done = cli("plan", str(others))
    assert done.returncode == 1
    assert (f"container rtvi-{instance}-first (Deployment/first of reconciler instance "
            f"{instance}) publishes 127.0.0.1:{port}") in done.stdout, done.stdout

    foreign_port = free_port()
    foreign = docker_client.containers.run(emulator_image, name=f"foreign-{instance}",
                                           detach=True, labels={"rtvi.test": "1"},
                                           ports={"8000/tcp": ("127.0.0.1", foreign_port)})
    try:
        write(others, deployment("second", pinned(emulator_image), foreign_port))
        done = cli("plan", str(others))
        assert done.returncode == 1
        assert (f"container foreign-{instance} (not managed by this reconciler) publishes "
                f"127.0.0.1:{foreign_port}") in done.stdout, done.stdout
    finally:
        foreign.remove(force=True)


@pytest.mark.parametrize("network", ["bridge", "host"])
def test_paused_container_is_degraded_and_left_paused(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path, network: str) -> None:
    """On the Host's network a paused service still holds its port: it is Paused, not "a
    process on the Host listens" (issue 26)."""
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()) if network == "bridge"
          else rtvi_deployment(emulator_image, free_port()))
    assert cli("apply", str(specs)).returncode == 0
    [container] = containers_of(docker_client, instance)
    container.pause()

    done = cli("apply", str(specs))
    assert done.returncode == 1, done.stdout
    assert "Paused" in done.stdout, done.stdout
    status = _status(cli, "vlm")
    ready, degraded = _condition(status, "Ready"), _condition(status, "Degraded")
    assert (ready["status"], ready["reason"]) == ("False", "Paused")
    assert (degraded["status"], degraded["reason"]) == ("True", "Paused")
    assert f"docker unpause {container.name}" in degraded["message"]
    [still] = containers_of(docker_client, instance)
    assert still.id == container.id
    assert still.status == "paused"

    still.unpause()
    _wait_healthy(still)  # healthchecks failed while it was frozen; one pass clears that
    resumed = cli("apply", str(specs))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    status = _status(cli, "vlm")
    assert _condition(status, "Ready")["status"] == "True"
    assert _condition(status, "Degraded")["status"] == "False"
    [same] = containers_of(docker_client, instance)
    assert same.id == container.id


def test_a_port_freed_by_another_process_is_taken_within_seconds(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """Issue 26: the process frees its port without any event the daemon could see; the
    Deployment was Stalled until the periodic resync (215 s). Issue 38: it was retried with
    a backoff that grew to 30 s, and came back 62.7 s after the release; the tries of such a
    refusal stay at most 5 s apart however long the port is held."""
    specs = tmp_path / "specs"
    listener = socket.socket()
    listener.bind(("127.0.0.1", free_port()))
    listener.listen()
    port = listener.getsockname()[1]
    write(specs, deployment("vlm", pinned(emulator_image), port))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        refused = wait_for("the port refusal", lambda: (
            s if (s := status_of(cli, "Deployment/vlm")) is not None
            and f"host port {port} is taken" in json.dumps(s) else None), 30)
        stalled = [c for c in refused["conditions"] if c["type"] == "Stalled"]
        assert all(c["status"] != "True" for c in stalled)  # retried, not stalled
        # Six tries: the plain backoff would be at 16 s by now (0.5, 1, 2, 4, 8, 16).
        backoffs = wait_for("six tries", lambda: (
            b if len(b := [e.message for e in events_of(cli, "Deployment/vlm")
                           if e.reason == "Backoff"]) >= 6 else None), 60)
        delays = [float(m.split("retrying in ")[1].split("s")[0]) for m in backoffs]
        assert max(delays) <= 5.0, delays
        listener.close()
        wait_for("Ready once the port is free", lambda: is_ready(cli, "Deployment/vlm"), 30)
        assert len(containers_of(docker_client, instance)) == 1
    finally:
        listener.close()
        daemon.terminate()
