"""A real image registry on loopback (``scripts/registry.sh``: distribution with TLS and an
htpasswd login, NGC's ``$oauthtoken`` convention), and images pushed to it for a test.

The password is a canary: tests search every output for it. Each pushed image is a fresh
one (a label of its own on the emulator image, optionally a layer of random bytes), so a
Host lacks it until something pulls it; ``push`` removes the local copy once pushed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import httpx
import pytest

from controllers.waiting import until
from tests.ports import free_port

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "registry.sh"
CERTS_D = Path("/etc/docker/certs.d")
USER = "$oauthtoken"
READY_S = 30.0


@dataclass
class Registry:
    folder: Path
    port: int
    password: str
    process: subprocess.Popen[bytes] | None = None
    pushed: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def login(self) -> dict[str, object]:
        """A Host's ``registries`` entry for it, the password from ``NGC_API_KEY``."""
        return {"server": self.address, "username": USER,
                "password": {"fromEnv": "NGC_API_KEY"}}

    def start(self) -> None:
        env = dict(os.environ, REGISTRY_PASSWORD=self.password)
        log = (self.folder / "registry.log").open("ab")
        self.process = subprocess.Popen(["bash", str(SCRIPT), str(self.folder), str(self.port)],
                                        env=env, stdout=log, stderr=log,
                                        start_new_session=True)
        cert = self.folder / "cert.pem"

        def answers() -> bool | None:
            if not cert.exists():
                return None
            try:
                reply = httpx.get(f"https://{self.address}/v2/", timeout=2,
                                  verify=ssl.create_default_context(cafile=str(cert)))
            except httpx.HTTPError:
                return None
            return True if reply.status_code == httpx.codes.UNAUTHORIZED else None
        assert until(answers, timeout_s=READY_S, pace=0.1), (
            (self.folder / "registry.log").read_text())

    def trust_at(self, port: int) -> str:
        """Let engines trust this registry's certificate at another port of 127.0.0.1 (a
        relay in front of it); returns that address."""
        address = f"127.0.0.1:{port}"
        (CERTS_D / address).mkdir(parents=True, exist_ok=True)
        shutil.copy(self.folder / "cert.pem", CERTS_D / address / "ca.crt")
        self.aliases.append(address)
        return address

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def push(self, client: docker.DockerClient, base: str, repository: str, tag: str,
             random_mib: int = 0, env: dict[str, str] | None = None) -> str:
        """Build a fresh image on ``base`` (its own label; ``random_mib`` of random bytes in
        a layer; ``env`` baked in, as a release's behaviour is), push it as
        ``repository:tag`` and remove it here; returns its digest."""
        with tempfile.TemporaryDirectory() as context:
            lines = [f"FROM {base}", f'LABEL rtvi.test.unique="{secrets.token_hex(8)}"',
                     *(f"ENV {name}={value}" for name, value in (env or {}).items())]
            if random_mib:
                (Path(context) / "blob").write_bytes(os.urandom(random_mib << 20))
                lines.append("COPY blob /blob")
            (Path(context) / "Dockerfile").write_text("\n".join(lines) + "\n")
            image, _ = client.images.build(path=context, rm=True)
        ref = f"{self.address}/{repository}"
        image.tag(ref, tag)
        digest = ""
        for message in client.api.push(ref, tag, stream=True, decode=True,
                                       auth_config={"username": USER,
                                                    "password": self.password}):
            assert "error" not in message, message
            digest = (message.get("aux") or {}).get("Digest", digest)
        assert digest.startswith("sha256:")
        client.images.remove(image.id, force=True)
        self.pushed.append(f"{ref}@{digest}")
        return str(digest)


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    if shutil.which("docker-registry") is None:
        raise RuntimeError("docker-registry is not installed: scripts/setup.sh installs it")
    folder = Path(tempfile.mkdtemp(prefix="rtvi-registry-"))
    found = Registry(folder, free_port(), "canary-registry-" + secrets.token_hex(12))
    found.start()
    try:
        yield found
    finally:
        found.stop()
        for address in [found.address, *found.aliases]:
            shutil.rmtree(CERTS_D / address, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
