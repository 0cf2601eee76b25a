"""The typed Docker client against the real engine: the image probe and its sweep."""

from __future__ import annotations

import docker

from controllers.docker_client import PROBE_LABEL, DockerEngine


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
