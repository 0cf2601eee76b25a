"""One daemon, two Hosts: the local engine and a second engine behind a real sshd on loopback."""

from __future__ import annotations

import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

import docker
import yaml

from controllers.ownership import LABEL_INSTANCE
from tests.conftest import Cli
from tests.e2e.daemon_helpers import (
    DaemonProcess,
    condition,
    is_ready,
    owned,
    status_of,
    wait_for,
)
from tests.ports import free_port
from tests.remote_engine import (  # noqa: F401
    RemoteEngine,
    remote_engine_fixture,
    remote_fixture,
)
from tests.specs_factory import HOST, deployment, pinned


def _remote_owned(remote: RemoteEngine, instance: str) -> list[Any]:
    found: list[Any] = remote.client.containers.list(
        all=True, filters={"label": f"{LABEL_INSTANCE}={instance}"})
    return found


def _cond(cli: Cli, resource: str, ctype: str) -> dict[str, Any] | None:
    return condition(status_of(cli, resource), ctype)


def test_two_hosts_one_unreachable_then_back(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        remote: RemoteEngine, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    far = deployment("far", pinned(emulator_image), free_port())
    far["spec"]["host"] = "edge"
    (specs / "fleet.yaml").write_text(yaml.safe_dump_all(
        [HOST, remote.host_document("edge"),
         deployment("near", pinned(emulator_image), free_port()), far], sort_keys=False))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        for name in ("near", "far"):
            wait_for(f"{name} Ready", partial(is_ready, cli, f"Deployment/{name}"), 60)
        [near] = owned(docker_client, instance)
        [far_container] = _remote_owned(remote, instance)
        assert near.labels["rtvi.reconciler/resource"] == "Deployment/near"
        assert far_container.labels["rtvi.reconciler/resource"] == "Deployment/far"
        edge = status_of(cli, "Host/edge")
        assert edge is not None
        assert edge["facts"]["reachable"] is True
        assert edge["facts"]["docker"] == remote.url
        assert edge["facts"]["gpus"] == "none"
        assert edge["facts"]["engineVersion"]

        remote.stop_sshd()
        wait_for("the edge Host to turn Degraded",
                 lambda: (_cond(cli, "Host/edge", "Degraded") or {}).get("status") == "True", 15)
        wait_for("its Deployment to turn Degraded",
                 lambda: (_cond(cli, "Deployment/far", "Degraded") or {}).get(
                     "status") == "True", 15)
        assert (_cond(cli, "Deployment/far", "Ready") or {}).get("status") == "Unknown"
        assert is_ready(cli, "Deployment/near")  # the local one is unaffected
        assert [c.id for c in owned(docker_client, instance)] == [near.id]
        assert [c.id for c in _remote_owned(remote, instance)] == [far_container.id]  # kept

        remote.start_sshd()
        back = time.monotonic()
        wait_for("the edge Host to be reachable again",
                 lambda: (_cond(cli, "Host/edge", "Ready") or {}).get("status") == "True", 60)
        wait_for("its Deployment Ready again", lambda: is_ready(cli, "Deployment/far"), 60)
        assert time.monotonic() - back < 60
        assert [c.id for c in _remote_owned(remote, instance)] == [far_container.id]
        assert [c.id for c in owned(docker_client, instance)] == [near.id]
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_unknown_host_key_is_refused_and_nothing_is_created(
        cli: Cli, instance: str, emulator_image: str, remote: RemoteEngine,
        tmp_path: Path) -> None:
    # A well-formed known_hosts entry for the right address, but some other machine's key.
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True, timeout=30)
    key_type, key_b64 = other.with_suffix(".pub").read_text().split()[:2]
    stranger = tmp_path / "known_hosts"
    stranger.write_text(f"[127.0.0.1]:{remote.ssh_port} {key_type} {key_b64}\n")
    host = remote.host_document("edge")
    host["spec"]["ssh"]["knownHostsFile"] = str(stranger)
    far = deployment("far", pinned(emulator_image), free_port())
    far["spec"]["host"] = "edge"
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "edge.yaml").write_text(yaml.safe_dump_all([host, far], sort_keys=False))

    applied = cli("apply", str(specs), "--timeout", "30")
    assert applied.returncode == 1
    text = applied.stdout + applied.stderr
    assert "host key" in text.lower(), text
    assert "edge" in text, text
    assert _remote_owned(remote, instance) == []

    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        stalled = wait_for("the Host to be refused",
                           lambda: (c := _cond(cli, "Host/edge", "Stalled")) and c[
                               "status"] == "True" and c, 15)
        assert "host key" in str(stalled["message"]).lower()
        assert _remote_owned(remote, instance) == []
        assert remote.client.containers.list(all=True) == []
    finally:
        assert daemon.terminate() == 0, daemon.log()
