"""A run's cleanup on the real engine: one deadline, whatever grace the template allows.

Two fresh-clone runs failed a canary's cleanup gate with "containers: 30.3s": a run container
had waited out the template's 30 s stop grace inside a 20 s cleanup. The cleanup now stops its
containers together, kills what ignores SIGTERM in time for the rest of the deadline, and says
in the evidence which container needed it.
"""

from __future__ import annotations

import threading

import docker
import pytest

from controllers.clients.docker_client import ContainerRequest, DockerEngine
from controllers.kinds.experiments import service
from controllers.kinds.experiments.cleanup import clean
from controllers.ownership import labels_for
from state.keys import Key
from state.models import Owner

RESOURCE = Key("Experiment", "stubborn")
DEADLINE_S = 8.0
TEMPLATE_GRACE_S = 30  # longer than the whole cleanup deadline
COMMANDS = {
    "deaf": ["sh", "-c", "trap '' TERM; echo still here; while :; do sleep 1; done"],
    "polite": ["sleep", "600"],  # ends on SIGTERM (tini forwards it)
}


def test_cleanup_kills_what_ignores_sigterm_within_its_deadline_and_says_which(
        docker_client: docker.DockerClient, emulator_image: str, instance: Owner) -> None:
    engine = DockerEngine("unix:///var/run/docker.sock", "local")
    names = set()
    try:
        for role, command in COMMANDS.items():
            name = f"rtvi-{instance}-{role}"
            names.add(name)
            engine.start(engine.create(ContainerRequest(
                name=name, image=emulator_image, environment={}, entrypoint=command,
                init=True,
                labels=labels_for(instance, RESOURCE, "sha256:0", run_id="stubborn-1"))))
        report = clean(engine, instance, RESOURCE, None, [], names, DEADLINE_S,
                       TEMPLATE_GRACE_S, threading.Event())
        stopped = report.evidence.containersStopped or {}
        assert report.problems == []  # within the deadline, nothing left
        assert report.evidence.containersLeft == []
        assert stopped[f"rtvi-{instance}-deaf"].startswith("killed after")
        assert "of SIGTERM; its last lines:\nstill here" in stopped[f"rtvi-{instance}-deaf"]
        assert stopped[f"rtvi-{instance}-polite"].startswith("stopped in")
        assert docker_client.containers.list(all=True, filters={"name": instance}) == []
    finally:
        engine.close()


def test_a_stop_queued_behind_others_gets_only_what_the_deadline_leaves(
        docker_client: docker.DockerClient, emulator_image: str, instance: Owner,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """More containers than stopping threads: one queued behind a container that ignored
    SIGTERM is given what is left of the deadline, not a whole grace period again."""
    monkeypatch.setattr(service, "STOP_WORKERS", 1)
    engine = DockerEngine("unix:///var/run/docker.sock", "local")
    names = set()
    try:
        for i in range(2):
            name = f"rtvi-{instance}-deaf{i}"
            names.add(name)
            engine.start(engine.create(ContainerRequest(
                name=name, image=emulator_image, environment={}, entrypoint=COMMANDS["deaf"],
                init=True, labels=labels_for(instance, RESOURCE, "sha256:0", run_id="stubborn-2"))))
        report = clean(engine, instance, RESOURCE, None, [], names, DEADLINE_S,
                       TEMPLATE_GRACE_S, threading.Event())
        assert report.problems == []  # two kills inside one 8 s deadline, one after the other
        assert all(how.startswith("killed after")
                   for how in (report.evidence.containersStopped or {}).values())
    finally:
        engine.close()
