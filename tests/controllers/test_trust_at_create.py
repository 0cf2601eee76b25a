"""The trust boundary asked again where and when a bind is made (issue 26): a spec's paths are
judged at load on the reconciler's machine, but Docker follows a bind's source on the Host
when the container is created. A symlink planted in an allowed folder since, or one only the
remote Host has, must not carry a bind out of it. Real engines, real sshd, real symlinks."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from controllers.clients.docker_client import ContainerRequest, DockerEngine
from controllers.errors import ControllerError, PermanentError
from controllers.kinds.host.session import HostSession
from specs.models import Host
from specs.trust import enforce, policy
from tests.conftest import LABEL_TEST, TEST_IMAGE_TAG
from tests.remote_engine import RemoteEngine, remote_engine_fixture  # noqa: F401

pytestmark = pytest.mark.docker


@pytest.fixture
def allowed(tmp_path: Path) -> Iterator[Path]:
    """An allowed media folder holding a clip and a link out of it (to this machine's
    ``/etc/hostname``), with the operator's policy enforced as the CLI enforces it."""
    folder = tmp_path / "media"
    folder.mkdir()
    (folder / "clip.mp4").write_bytes(b"\x00" * 16)
    (folder / "planted").symlink_to("/etc/hostname")
    enforce(policy({"media": (str(folder),)}, (), "the test's policy"))
    try:
        yield folder
    finally:
        enforce(None)


def request(name: str, source: Path) -> ContainerRequest:
    # Labelled as the session sweep knows a test's leftovers (a run killed mid-test).
    return ContainerRequest(name=name, image=TEST_IMAGE_TAG, labels={LABEL_TEST: "1"},
                            environment={}, mounts=[(str(source), "/media/clip.mp4", True)],
                            reads=[("media", str(source))], command=["true"])


def test_a_bind_that_leads_out_of_its_folder_is_refused_and_nothing_is_created(
        allowed: Path, docker_client: docker.DockerClient, emulator_image: str) -> None:
    engine = DockerEngine("unix:///var/run/docker.sock", "local")
    name = f"rtvi-trust-{secrets.token_hex(4)}"  # a killed earlier run's must not answer
    try:
        with pytest.raises(PermanentError) as refused:
            engine.create(request(name, allowed / "planted"))
        assert str(refused.value) == (
            f"container {name} not created: '{allowed / 'planted'}' leads to '/etc/hostname' "
            "on Host local, outside the folders media may be read from (trust boundary: the "
            "operator's folders and commands)")
        assert not docker_client.containers.list(all=True, filters={"name": name})
        # Inside its folder, the same request is created: the check refuses only the link.
        engine.remove(engine.create(request(name, allowed / "clip.mp4")))
    finally:
        engine.close()
        for left in docker_client.containers.list(all=True, filters={"name": name}):
            left.remove(force=True)


def test_on_an_ssh_host_the_host_resolves_the_path_over_its_connection(
        allowed: Path, remote_engine: RemoteEngine) -> None:
    short = Path(tempfile.mkdtemp(prefix="rtvi-tr-"))  # the forwarded socket's path is short
    session = HostSession(Host.model_validate(remote_engine.host_document("edge")), short)
    try:
        engine = session.engine()
        # ``realpath -m`` on the Host (here the same machine, so the answers can be checked):
        # links followed, a missing tail kept.
        assert engine.resolver([str(allowed / "planted"), str(allowed / "gone" / "x")]) == [
            "/etc/hostname", str(allowed.resolve() / "gone" / "x")]
        name = f"rtvi-trust-edge-{secrets.token_hex(4)}"
        with pytest.raises(PermanentError, match="leads to '/etc/hostname' on Host edge"):
            engine.create(request(name, allowed / "planted"))
        assert not remote_engine.client.containers.list(all=True, filters={"name": name})
        # It is the Host that answers: with its sshd gone, nothing is resolved (or created).
        remote_engine.stop_sshd()
        try:
            with pytest.raises(ControllerError, match="Host edge"):
                engine.resolver([str(allowed / "clip.mp4")])
        finally:
            remote_engine.start_sshd()
    finally:
        session.close()
