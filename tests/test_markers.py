"""The markers tell the truth: a test outside the ``docker`` marker cannot reach the engine.

``pytest -m "not docker and not services"`` is the fast layer CI runs first; if a test there
could call Docker it would be neither fast nor honest about what it needs.
"""

from __future__ import annotations

import docker
import pytest

from controllers.clients.docker_client import DockerEngine


def test_an_unmarked_test_cannot_reach_the_docker_engine(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("docker") is None
    with pytest.raises(AssertionError, match="not marked docker"):
        docker.from_env()
    with pytest.raises(AssertionError, match="not marked docker"):
        DockerEngine("unix:///var/run/docker.sock", "local")


def test_a_test_with_a_docker_fixture_is_marked(docker_client: docker.DockerClient,
                                                request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("docker") is not None
    assert docker_client.ping()
