"""Shared fixtures: a real Docker engine, the emulator image, isolated instances and state.

Every test gets its own reconciler instance name, so container names (``rtvi-<instance>-x``)
and labels never collide between tests, and cleanup is by label. Containers left by a killed
earlier run are removed at session start.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.api.client
import docker.errors
import pytest
import tenacity

from emulators.image import build_emulator_image
from specs.trust import enforce
from state.lock import pid_alive
from state.models import Owner
from tests.etcd_cluster import etcd_cluster  # noqa: F401  (a fixture for every test module)
from tests.registry import registry  # noqa: F401  (a fixture for every test module)

TEST_INSTANCE_PREFIX = "t"
TEST_IMAGE_TAG = "rtvi-emulator:test"
LABEL_INSTANCE = "rtvi.reconciler/instance"
LABEL_TEST = "rtvi.test"
RECONCILER = str(Path(sys.executable).with_name("reconciler"))


def _session_pid(instance: str) -> int | None:
    """The pytest PID embedded in a test instance name (``t-<pid>-<hex>``)."""
    parts = instance.split("-")
    if len(parts) == 3 and parts[0] == TEST_INSTANCE_PREFIX and parts[1].isdigit():
        return int(parts[1])
    return None


# Fixtures that reach the Docker engine (every other Docker fixture depends on one of them).
DOCKER_FIXTURES = frozenset({"docker_client", "docker_engine", "emulator_image",
                             "remote_engine"})
SERVICE_FIXTURES = frozenset({"start_emulator", "rtsp_server", "rtsp_source", "etcd_cluster",
                              "registry"})


def _remove_test_containers(client: docker.DockerClient, at_exit: bool) -> None:
    """Remove test containers of this session (at exit) or of sessions that are gone (at
    start): a concurrent pytest run on the same engine keeps its containers. One listing
    call, no inspect per container: a container removed meanwhile (a probe, a run's cleanup)
    made docker-py's per-container inspect fail the whole session's teardown."""
    for row in client.api.containers(all=True):
        labels = row.get("Labels") or {}
        instance = labels.get(LABEL_INSTANCE, "")
        pid = _session_pid(instance)
        if pid is not None:
            doomed = pid == os.getpid() if at_exit else not pid_alive(pid)
        elif instance.startswith(TEST_INSTANCE_PREFIX + "-"):
            doomed = not at_exit  # an older naming scheme: nobody runs it any more
        else:
            doomed = labels.get(LABEL_TEST) == "1" and row.get("State") != "running"
        if doomed:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                client.api.remove_container(row["Id"], force=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers from fixtures, so they cannot drift from what a test really uses: ``docker``
    for a test that uses the Docker engine, ``services`` for one that starts emulator
    processes or RTSP servers (real decoding, seconds each). ``pytest -m "not docker and not
    services"`` is the fast layer: pure rules, planners, loader limits, redaction, ownership,
    store and prune guard."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & DOCKER_FIXTURES:
            item.add_marker(pytest.mark.docker)
        if used & SERVICE_FIXTURES:
            item.add_marker(pytest.mark.services)


_engine_allowed = [True]
_real_api_init = docker.api.client.APIClient.__init__


def _guarded_api_init(self: docker.api.client.APIClient, *args: Any, **kwargs: Any) -> None:
    if not _engine_allowed[0]:
        raise AssertionError("a test not marked docker used the Docker engine: use a Docker "
                             f"fixture ({', '.join(sorted(DOCKER_FIXTURES))}) or the marker")
    _real_api_init(self, *args, **kwargs)


docker.api.client.APIClient.__init__ = _guarded_api_init


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of the test is set up (module-scoped ones included)."""
    _engine_allowed[0] = item.get_closest_marker("docker") is not None


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _engine_allowed[0] = True
    # The trust policy in force is process-wide (what the CLI or a job put in force): a test
    # that set one, or ran code that does, must not leave it to the next test of its worker.
    enforce(None)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    try:
        client.ping()
    except docker.errors.DockerException as exc:  # pragma: no cover - environment problem
        pytest.fail(f"no Docker engine answers ({exc}); start dockerd (see scripts/setup.sh)")
    _remove_test_containers(client, at_exit=False)
    yield client
    _remove_test_containers(client, at_exit=True)
    client.close()


@pytest.fixture(scope="session")
def emulator_image(docker_client: docker.DockerClient) -> str:
    """The emulator image ID, built on this machine without any registry."""
    return build_emulator_image(TEST_IMAGE_TAG)


@pytest.fixture
def instance(docker_client: docker.DockerClient) -> Iterator[Owner]:
    """A test's own instance name. As an :class:`Owner` with no owner ID (a test's engine
    calls have no state directory): its labels are judged by the name alone, and a state
    directory of the same name adopts what it labels."""
    name = f"{TEST_INSTANCE_PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
    yield Owner(name, "")
    for container in containers_of(docker_client, name):
        container.remove(force=True)


def trust_file_for_tests() -> Path:
    """The trust file every test's ``reconciler`` runs with (tests that judge the boundary
    pass their own): the files tests write (under the temporary folder) and this checkout (the
    harness stand-in) may be read; the harness stand-in runs with this Python."""
    path = Path(tempfile.gettempdir()) / f"rtvi-test-trust-{os.getpid()}.toml"
    if not path.exists():
        roots = json.dumps([tempfile.gettempdir(), str(Path(__file__).resolve().parent.parent)])
        commands = json.dumps([sys.executable, "python3"])
        path.write_text(f"[read]\nsecrets = {roots}\nmedia = {roots}\nharness = {roots}\n"
                        f"mounts = {roots}\nssh = {roots}\nevidence = {roots}\n"
                        f"images = {roots}\n"
                        f"[run]\ncommands = {commands}\n"
                        # tests pull only from registries they run on loopback
                        '[pull]\nregistries = ["127.0.0.1"]\n')
    return path


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


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
                    "RECONCILER_INSTANCE": self.instance, "COLUMNS": "200",
                    "RECONCILER_TRUST": str(trust_file_for_tests())})
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


def containers_of(client: docker.DockerClient, instance: str, *labels: str) -> list[Any]:
    """Every container (any state) of one test instance, carrying ``labels`` too (``key`` or
    ``key=value``). docker-py lists, then inspects each one; a container removed in between
    (a short-lived probe, a job ending) raises NotFound, so it lists again."""
    wanted = [f"{LABEL_INSTANCE}={instance}", *labels]
    listing = tenacity.Retrying(retry=tenacity.retry_if_exception_type(docker.errors.NotFound),
                                stop=tenacity.stop_after_attempt(5), reraise=True)
    found: list[Any] = listing(client.containers.list, all=True, filters={"label": wanted})
    return found
