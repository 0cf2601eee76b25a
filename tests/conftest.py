"""Shared fixtures: a real Docker engine, the emulator image, isolated instances and state.

Every test gets its own reconciler instance name, so container names (``rtvi-<instance>-x``)
and labels never collide between tests, and cleanup is by label. Containers left by a killed
earlier run are removed at session start.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from emulators.image import build_emulator_image

TEST_INSTANCE_PREFIX = "t"
TEST_IMAGE_TAG = "rtvi-emulator:test"
LABEL_INSTANCE = "rtvi.reconciler/instance"
LABEL_TEST = "rtvi.test"
RECONCILER = str(Path(sys.executable).with_name("reconciler"))


def _remove_test_containers(client: docker.DockerClient) -> None:
    for container in client.containers.list(all=True):
        labels = container.labels or {}
        instance = labels.get(LABEL_INSTANCE, "")
        if labels.get(LABEL_TEST) == "1" or (instance.startswith(TEST_INSTANCE_PREFIX + "-")):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    try:
        client.ping()
    except docker.errors.DockerException as exc:  # pragma: no cover - environment problem
        pytest.fail(f"no Docker engine answers ({exc}); start dockerd (see scripts/setup.sh)")
    _remove_test_containers(client)
    yield client
    _remove_test_containers(client)
    client.close()


@pytest.fixture(scope="session")
def emulator_image(docker_client: docker.DockerClient) -> str:
    """The emulator image ID, built on this machine without any registry."""
    return build_emulator_image(TEST_IMAGE_TAG)


@pytest.fixture
def instance(docker_client: docker.DockerClient) -> Iterator[str]:
    name = f"{TEST_INSTANCE_PREFIX}-{secrets.token_hex(4)}"
    yield name
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_INSTANCE}={name}"}
    ):
        container.remove(force=True)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cli:
    """Runs the real ``reconciler`` console script against one state dir and instance."""

    def __init__(self, state_dir: Path, instance: str, extra_env: dict[str, str]) -> None:
        self.state_dir = state_dir
        self.instance = instance
        self.extra_env = extra_env
        self.transcript: list[str] = []

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"RECONCILER_STATE_DIR": str(self.state_dir),
                    "RECONCILER_INSTANCE": self.instance, "COLUMNS": "200"})
        env.update(self.extra_env)
        return env

    def __call__(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([RECONCILER, *args], capture_output=True, text=True,
                              env=self.env(), timeout=timeout, check=False)
        self.transcript.append(done.stdout + done.stderr)
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([RECONCILER, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.env())


@pytest.fixture
def cli(state_dir: Path, instance: str) -> Cli:
    return Cli(state_dir, instance, {})
