"""The typed Docker client against the real engine: the image probe and its sweep, ports."""

from __future__ import annotations

import docker
import httpx
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_fixed

from controllers.clients.docker_client import PROBE_LABEL, ContainerRequest, DockerEngine
from controllers.kinds.host.hostview import view_from_rows
from tests.ports import free_port


def test_image_probe_answers_and_sweeps_leftovers(docker_client: docker.DockerClient,
                                                  emulator_image: str) -> None:
    # What a run killed mid-probe leaves: a created, never started, probe-labelled container.
    leftover = docker_client.containers.create(emulator_image, command=["true"],
                                               labels={PROBE_LABEL: "1"})
    engine = DockerEngine("unix:///var/run/docker.sock", "local", probe_sweep_age_s=0)
    try:
        assert engine.path_in_image(emulator_image, "/opt/emu/emulators/rtvi") is True
        assert engine.path_in_image(emulator_image, "/opt/no/such/path") is False
        left = docker_client.containers.list(all=True, filters={"label": PROBE_LABEL})
        assert leftover.id not in [c.id for c in left]
        assert left == []  # and the probes themselves are gone
    finally:
        engine.close()
        for container in docker_client.containers.list(all=True,
                                                       filters={"id": leftover.id}):
            container.remove(force=True)


UNEXPOSED_PORT = 19101  # the emulator image EXPOSEs 8000 only
ANSWER_TIMEOUT_S = 60


def test_port_the_image_does_not_expose_is_published_and_answers(
        docker_client: docker.DockerClient, emulator_image: str, instance: str) -> None:
    host_port = free_port()
    engine = DockerEngine("unix:///var/run/docker.sock", "local")
    request = ContainerRequest(
        name=f"rtvi-{instance}-ports", image=emulator_image,
        labels={"rtvi.reconciler/instance": instance},
        environment={"RTVI_EMU_PORT": str(UNEXPOSED_PORT)},
        ports={f"{UNEXPOSED_PORT}/tcp": ("127.0.0.1", host_port)})
    try:
        container_id = engine.create(request)
        engine.start(container_id)
        config = docker_client.api.inspect_container(container_id)["Config"]
        assert f"{UNEXPOSED_PORT}/tcp" in config["ExposedPorts"]
        assert engine.host_port(container_id, f"{UNEXPOSED_PORT}/tcp") == host_port
        view = view_from_rows(*engine.list_rows())
        holders = [h for h in view.published if h.container == request.name]
        assert [(h.address, h.port) for h in holders] == [("127.0.0.1", host_port)]
        seen = view.container(request.name)  # the list row says what an inspect says
        assert seen is not None
        assert seen.id == container_id
        assert seen.running
        assert seen.labels["rtvi.reconciler/instance"] == instance
        image = view.image(f"rtvi-emulator@{emulator_image}")
        assert image is not None
        assert image.id == emulator_image

        @retry(stop=stop_after_delay(ANSWER_TIMEOUT_S), wait=wait_fixed(0.2),
               retry=retry_if_exception_type(httpx.TransportError), reraise=True)
        def answer() -> int:
            return httpx.get(f"http://127.0.0.1:{host_port}/v1/health/live", timeout=2).status_code

        assert answer() < 500  # the service itself answered through the published port
    finally:
        engine.close()
