"""The runner image (issue 27), built on a real engine and on a real second engine over SSH:
the run code and everything it imports load inside it, plots render, and nothing else of ours
(the CLI, the daemon, the emulators, the tests, the SSH client) or of the dev tools is in it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from controllers.clients.docker_client import DockerEngine
from controllers.kinds.experiments.runner import image as runner_image
from controllers.ownership import LABEL_MANAGED_BY, MANAGED_BY
from tests.controllers.publisher_helpers import engine
from tests.remote_engine import RemoteEngine, remote_engine_fixture  # noqa: F401

pytestmark = pytest.mark.docker

# Every run type, the run itself and a plot written as the report does; then what must be absent.
CHECK = """
import importlib, importlib.util, sys
for name in ("controllers.kinds.experiments.run", "controllers.kinds.experiments.kind",
             "controllers.kinds.experiments.canary.runtype",
             "controllers.kinds.experiments.capacity.runtype",
             "controllers.kinds.experiments.portvalidation.runtype",
             "controllers.kinds.experiments.benchmark.runtype",
             "controllers.kinds.experiments.harnessproc",
             "pynvml", "prometheus_client.parser"):  # the lazy imports too (DCGM's parser)
    importlib.import_module(name)
from controllers.kinds.experiments.plots import LatencyPoint, latency_by_streams
png = latency_by_streams([LatencyPoint(2, 90.0, 120.0, 130.0, "stable"),
                          LatencyPoint(4, 3900.0, 4100.0, 4200.0, "unstable")],
                         "capacity", 2000.0, (2, 4))
absent = [n for n in ("reconciler", "emulators", "tests", "asyncssh", "pytest", "mypy")
          if importlib.util.find_spec(n) is not None]
print("absent-but-found:", absent)
print("plot bytes:", len(png) if png.startswith(b"\\x89PNG") else 0)
"""


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[DockerEngine]:
    eng = engine()
    yield eng
    eng.close()


def _check(client: docker.DockerClient, image_id: str) -> str:
    """Run CHECK in the image, with no network at all: the image needs nothing from outside."""
    out = client.containers.run(image_id, ["-c", CHECK], network_mode="none", remove=True)
    return bytes(out).decode()


def _assert_runs_the_run_code(output: str) -> None:
    assert "absent-but-found: []" in output, output
    size = int(output.split("plot bytes:", 1)[1].split()[0])
    assert size > 1000, output  # a real PNG, not an empty file


def test_the_image_is_built_once_and_runs_the_run_code(
        docker_engine: DockerEngine, docker_client: docker.DockerClient,
        capsys: pytest.CaptureFixture[str]) -> None:
    image_id = runner_image.ensure_runner_image(docker_engine)
    tag, _ = runner_image.image_tag()
    found = docker_engine.image(tag)
    assert found is not None
    assert found.id == image_id
    assert docker_client.images.get(image_id).labels[LABEL_MANAGED_BY] == MANAGED_BY
    capsys.readouterr()
    assert runner_image.ensure_runner_image(docker_engine) == image_id
    assert "imported" not in capsys.readouterr().err  # the second call found the tag
    _assert_runs_the_run_code(_check(docker_client, image_id))


def test_the_image_reaches_an_ssh_host_and_runs_there(remote_engine: RemoteEngine) -> None:
    local_dir = Path(tempfile.mkdtemp(prefix="rtvi-run-"))  # short: a socket path lives here
    try:
        with remote_engine.tunnel("remote", local_dir) as tunnel:
            remote = DockerEngine(tunnel.start(), "remote")
            try:
                image_id = runner_image.ensure_runner_image(remote)
            finally:
                remote.close()
        _assert_runs_the_run_code(_check(remote_engine.client, image_id))
    finally:
        shutil.rmtree(local_dir, ignore_errors=True)
