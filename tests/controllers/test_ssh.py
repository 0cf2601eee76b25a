"""SshTunnel against a real sshd and a second, real Docker engine (tests/remote_engine.py).

Why real parts: host-key strictness, stream-local forwarding, and what happens to docker-py when
the SSH connection drops are properties of OpenSSH, asyncssh and Docker together; a fake would
only test our assumptions about them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import httpx
import pytest
import structlog.testing

from controllers.clients.docker_client import DockerEngine
from controllers.clients.ssh import SshTunnel
from controllers.errors import HostUnreachable, PermanentError
from controllers.kinds.host.gpus import local_gpus, remote_gpus
from controllers.kinds.host.gputelemetry import (
    GpuReading,
    SmiStream,
    SmiTelemetry,
    TelemetryUnavailable,
)
from controllers.waiting import until
from tests.conftest import LABEL_TEST, TEST_IMAGE_TAG
from tests.ports import free_port
from tests.remote_engine import RemoteEngine, remote_engine_fixture  # noqa: F401

pytestmark = pytest.mark.docker

HOST = "remote"
LIVE_PATH = "/v1/health/live"
WAIT_S = 15.0
POLL_S = 0.05


@pytest.fixture
def local_dir() -> Iterator[Path]:
    """Short on purpose: the forwarded socket's path must fit in sun_path (108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="rtvi-ssh-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def tunnel(remote_engine: RemoteEngine, local_dir: Path) -> Iterator[SshTunnel]:
    with remote_engine.tunnel(HOST, local_dir) as t:
        yield t


@pytest.fixture(scope="module")
def remote_image(remote_engine: RemoteEngine, emulator_image: str) -> str:
    """The emulator image, copied from the main engine to the second one."""
    remote_engine.load_image(TEST_IMAGE_TAG)
    return TEST_IMAGE_TAG


@pytest.fixture(scope="module")
def emulator_port(remote_engine: RemoteEngine, remote_image: str) -> Iterator[int]:
    """An emulator container on the second engine, published on its 127.0.0.1."""
    port = free_port()
    container = remote_engine.client.containers.run(
        remote_image, detach=True, init=True, name=f"rtvi-ssh-emu-{secrets.token_hex(3)}",
        labels={LABEL_TEST: "1"}, ports={"8000/tcp": ("127.0.0.1", port)})
    yield port
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True)


def wait_live(address: tuple[str, int]) -> int:
    """Status of GET /v1/health/live through ``address``, polled until the emulator is up.
    trust_env=False: a proxy from the environment must never carry loopback traffic."""
    url = f"http://{address[0]}:{address[1]}{LIVE_PATH}"
    with httpx.Client(trust_env=False, timeout=2) as client:
        def status() -> int | None:
            try:
                return client.get(url).status_code
            except httpx.TransportError:
                return None
        found = until(status, timeout_s=WAIT_S, pace=POLL_S)
        return found if found is not None else client.get(url).status_code  # raises why


def test_docker_over_the_forwarded_socket(remote_engine: RemoteEngine, tunnel: SshTunnel,
                                          local_dir: Path, remote_image: str) -> None:
    url = tunnel.start()
    assert url == f"unix://{local_dir}/{HOST}.sock"
    assert tunnel.connected
    assert tunnel.start() == url  # idempotent
    marker = secrets.token_hex(4)
    labels = {LABEL_TEST: "1", "rtvi.test/ssh": marker}
    created = remote_engine.client.containers.create(remote_image, labels=labels)
    engine = DockerEngine(url, HOST)
    try:
        assert engine.version()["ApiVersion"]
        seen = engine.list_containers({"rtvi.test/ssh": marker})
        assert [c.id for c in seen] == [created.id]  # the second engine, not the main one
    finally:
        engine.close()
        created.remove(force=True)


def test_published_port_through_tcp_forward(tunnel: SshTunnel, emulator_port: int) -> None:
    address = tunnel.forward_tcp("127.0.0.1", emulator_port)
    assert address[0] == "127.0.0.1"
    assert wait_live(address) == 200
    assert tunnel.forward_tcp("127.0.0.1", emulator_port) == address  # cached per target


def test_remote_commands_are_shell_quoted(tunnel: SshTunnel) -> None:
    assert tunnel.run(["echo", "hi"]) == (0, "hi\n", "")
    assert tunnel.run(["printf", "%s|", "a b", "$HOME;x", "'q'"]) == (0, "a b|$HOME;x|'q'|", "")
    status, _, _ = tunnel.run(["sh", "-c", "exit 3"])
    assert status == 3


def test_remote_gpus(tunnel: SshTunnel) -> None:
    gpus, source = remote_gpus(tunnel)
    if shutil.which("nvidia-smi") is None:  # the "remote" host is this machine
        assert (gpus, source) == ([], "none")
    else:
        assert [g.uuid for g in gpus] == [g.uuid for g in local_gpus()[0]]


def test_gpu_telemetry_over_the_ssh_connection(tunnel: SshTunnel, local_dir: Path) -> None:
    """nvidia-smi runs on the Host, through its SSH connection; a stand-in that prints what a
    real H200 printed proves the path (the "remote" host here is this machine, without GPUs)."""
    data = Path(__file__).resolve().parent.parent / "data" / "h200-telemetry"
    stand_in = local_dir / "nvidia-smi"
    stand_in.write_text(f"#!/bin/sh\ncat '{data / 'nvidia-smi-telemetry.csv'}'\n")
    stand_in.chmod(0o755)
    snap = SmiTelemetry(tunnel.run, "Host remote", program=str(stand_in)).read()
    assert snap.gpus == (GpuReading(0, "GPU-d9031a23-259b-a182-af39-0018caae2354", 0, 143771,
                                    0.0),)
    if shutil.which("nvidia-smi") is None:
        with pytest.raises(TelemetryUnavailable) as caught:
            SmiTelemetry(tunnel.run, "Host remote").read()
        assert str(caught.value).startswith("nvidia-smi on Host remote exited 127: ")


def test_gpu_telemetry_over_ssh_is_one_stream_not_a_command_per_sample(
        tunnel: SshTunnel, local_dir: Path) -> None:
    """Issue 27: a run reading a remote Host's GPUs every interval starts one ``nvidia-smi
    -lms`` over the connection and reads its lines; it never runs a command per sample. The
    stand-in prints what a real H100's ``nvidia-smi -lms 200`` printed, and notes each start."""
    data = Path(__file__).resolve().parent.parent / "data" / "h100-telemetry"
    starts, pids = local_dir / "starts", local_dir / "pids"
    stand_in = local_dir / "nvidia-smi"
    stand_in.write_text(
        f"#!/bin/sh\necho \"$*\" >> '{starts}'\n"
        f"case \"$*\" in *-lms*) echo $$ >> '{pids}'\n"
        f"  while head -n 1 '{data / 'nvidia-smi-loop.csv'}'; do sleep 0.05; done;;\n"
        f"*) head -n 1 '{data / 'nvidia-smi-loop.csv'}';; esac\n")
    stand_in.chmod(0o755)
    source = SmiStream(tunnel.stream, tunnel.run, 0.05, "Host remote", program=str(stand_in),
                       idle_s=1.0)
    first = source.read()  # at once, from a one-shot reading
    h100 = "GPU-8700ecb8-bf58-65d2-6cc7-729da818b910"
    assert first.gpus == (GpuReading(0, h100, 0, 81559, 0.0),)
    seen: set[float] = set()

    def streamed() -> bool | None:
        seen.add(source.read().at)
        return True if len(seen) >= 10 else None
    assert until(streamed, timeout_s=WAIT_S, pace=POLL_S), seen
    said = starts.read_text().splitlines()
    assert len(said) == 2, said  # ten fresh samples, two commands: the one-shot and the loop
    assert said[1].endswith("--format=csv,noheader,nounits -lms 100"), said  # its floor
    # Nobody reads: the loop on the Host stops by itself (the channel closes; the command
    # dies at its next line), so no remote loop outlives the run that started it.
    (pid,) = [int(line) for line in pids.read_text().split()]

    def gone() -> bool | None:
        return None if Path(f"/proc/{pid}").exists() else True
    assert until(gone, timeout_s=WAIT_S, pace=POLL_S), f"the loop {pid} still runs"
    # The next read starts it again.
    assert source.read().gpus == first.gpus
    assert until(lambda: True if len(pids.read_text().split()) == 2 else None,
                 timeout_s=WAIT_S, pace=POLL_S)
    # A loop that dies on the Host (killed here: the "remote" is this machine) is said once,
    # with its end, and started again by the next read that finds its samples stale.
    os.kill(int(pids.read_text().split()[1]), signal.SIGKILL)
    with structlog.testing.capture_logs() as logs:
        def restarted() -> bool | None:
            source.read()
            return True if len(pids.read_text().split()) == 3 else None
        assert until(restarted, timeout_s=WAIT_S, pace=POLL_S), pids.read_text()
    (ended,) = [e for e in logs if e["event"] == "telemetry.stream_ended"]
    assert ended["why"] == "exited -9", ended  # killed by SIGKILL
    source.close()


def test_unknown_or_changed_host_key_is_permanent(remote_engine: RemoteEngine,
                                                  local_dir: Path) -> None:
    other = local_dir / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    other_pub = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    known_hosts = local_dir / "known_hosts"
    for content in (f"[127.0.0.1]:{remote_engine.ssh_port} {other_pub}\n",  # changed key
                    f"[127.0.0.1]:1 {other_pub}\n"):  # no key for this address at all
        known_hosts.write_text(content)
        tunnel = SshTunnel(HOST, remote_engine.url, str(remote_engine.key_file),
                           str(known_hosts), str(remote_engine.docker_socket), local_dir)
        with tunnel, pytest.raises(PermanentError) as caught:
            tunnel.start()
        message = str(caught.value)
        assert f"Host {HOST}: the SSH host key of 127.0.0.1:{remote_engine.ssh_port} is not in " \
               f"known_hosts file {known_hosts} (or has changed); refusing to connect" in message
        assert "add the key after verifying it" in message
        assert not tunnel.connected
        assert not (local_dir / f"{HOST}.sock").exists()


def test_missing_files_are_permanent(remote_engine: RemoteEngine, local_dir: Path) -> None:
    missing = str(local_dir / "nope")
    for key, known in ((missing, str(remote_engine.known_hosts_file)),
                       (str(remote_engine.key_file), missing)):
        with SshTunnel(HOST, remote_engine.url, key, known, str(remote_engine.docker_socket),
                       local_dir) as tunnel, pytest.raises(PermanentError, match=missing):
            tunnel.start()


def test_sshd_down_is_unreachable_then_reconnects(remote_engine: RemoteEngine, tunnel: SshTunnel,
                                                  emulator_port: int) -> None:
    url = tunnel.start()
    engine = DockerEngine(url, HOST)
    address = tunnel.forward_tcp("127.0.0.1", emulator_port)
    assert engine.version()["ApiVersion"]
    remote_engine.stop_sshd()
    try:
        until(lambda: None if tunnel.connected else True, timeout_s=WAIT_S, pace=POLL_S)
        assert not tunnel.connected
        with pytest.raises(HostUnreachable):
            engine.version()
        with pytest.raises(HostUnreachable, match=f"127.0.0.1:{remote_engine.ssh_port}"):
            tunnel.start()
        with pytest.raises(HostUnreachable):
            tunnel.run(["true"])
    finally:
        remote_engine.start_sshd()
    assert tunnel.start() == url  # same local socket path
    assert tunnel.connected
    assert engine.version()["ApiVersion"]  # the same DockerEngine works again
    assert tunnel.run(["echo", "back"])[1] == "back\n"
    again = tunnel.forward_tcp("127.0.0.1", emulator_port)
    assert again == address  # re-created on the same local port
    assert wait_live(again) == 200
    engine.close()
