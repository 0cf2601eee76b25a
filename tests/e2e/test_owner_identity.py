"""Two state directories with one instance name never take each other's containers (issue 9).

Each state directory records a random owner ID in instance.json and labels what it creates with
it; a container labelled by another directory is a Conflict, never recreated or deleted. A
container without an owner label (created before owner IDs existed) stays ours.
"""

from __future__ import annotations

import json
from pathlib import Path

import docker

from controllers import ownership
from state.keys import Key
from state.models import Owner
from state.store import Store
from tests.conftest import Cli, containers_of
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

RESOURCE = Key("Deployment", "vlm")
OURS, THEIRS = "a" * 32, "b" * 32


def _owner_id(state_dir: Path) -> str:
    owner = json.loads((state_dir / "instance.json").read_text())["owner"]
    assert isinstance(owner, str)
    return owner


def test_is_owned_judges_by_owner_id() -> None:
    ours = Owner("inst", OURS)
    labels = ownership.labels_for(ours, RESOURCE, "hash")
    assert labels[ownership.LABEL_OWNER] == OURS
    assert labels[ownership.LABEL_INSTANCE] == "inst"
    assert ownership.is_owned(labels, ours, RESOURCE)
    assert not ownership.is_owned(labels, Owner("inst", THEIRS), RESOURCE)
    assert not ownership.is_owned(labels, Owner("inst", ""), RESOURCE)  # no ID: not provably ours
    legacy = {k: v for k, v in labels.items() if k != ownership.LABEL_OWNER}
    assert ownership.is_owned(legacy, ours, RESOURCE)  # created before owner IDs: still ours
    assert "another state directory" in ownership.why_not_ours(labels, Owner("inst", THEIRS))


def test_instance_records_an_owner_id_and_migrates_old_files(tmp_path: Path) -> None:
    first, second = Store(tmp_path / "a"), Store(tmp_path / "b")
    a, b = first.instance("same"), second.instance("same")
    assert a == b == "same"
    assert a.owner_id != b.owner_id
    assert first.instance(None).owner_id == a.owner_id == _owner_id(tmp_path / "a")

    old = tmp_path / "old"
    old.mkdir(mode=0o700)
    (old / "instance.json").write_text('{"instance": "same", "created_at": "2026-01-01"}\n')
    migrated = Store(old).instance(None).owner_id
    assert migrated == _owner_id(old) == Store(old).instance("same").owner_id
    assert json.loads((old / "instance.json").read_text())["created_at"] == "2026-01-01"


def test_second_state_dir_with_the_same_instance_conflicts_and_deletes_nothing(
        cli: Cli, instance: Owner, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    assert cli("apply", str(specs)).returncode == 0
    [first] = containers_of(docker_client, instance)
    assert first.labels[ownership.LABEL_OWNER] == _owner_id(cli.state_dir)

    other = Cli(tmp_path / "other-state", instance, {})
    plan = other("plan", str(specs))
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "Conflict" in plan.stdout, plan.stdout + plan.stderr
    applied = other("apply", str(specs))
    assert applied.returncode == 1, applied.stdout + applied.stderr
    assert "Conflict" in applied.stdout
    assert "another state directory" in applied.stdout
    deleted = other("delete", str(specs))
    assert "removed container" not in deleted.stdout, deleted.stdout

    [still] = containers_of(docker_client, instance)
    assert still.id == first.id
    assert still.status == "running"
    assert cli("apply", str(specs)).returncode == 0  # the first directory still owns it
    assert [c.id for c in containers_of(docker_client, instance)] == [first.id]


def test_container_without_owner_label_stays_ours(
        cli: Cli, instance: Owner, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """A container from before owner IDs (no owner label, our instance) is recreated for a
    changed spec like any of ours, not reported as a Conflict."""
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    cli.state_dir.mkdir(mode=0o700)
    (cli.state_dir / "instance.json").write_text(json.dumps({"instance": instance}) + "\n")
    legacy_labels = {k: v for k, v in ownership.labels_for(instance, RESOURCE, "old").items()}
    legacy = docker_client.containers.run(emulator_image, name=f"rtvi-{instance}-vlm",
                                          detach=True, init=True, labels=legacy_labels)
    applied = cli("apply", str(specs))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Conflict" not in applied.stdout
    [now] = containers_of(docker_client, instance)
    assert now.id != legacy.id  # recreated for the spec change, as ours
    assert now.labels[ownership.LABEL_OWNER] == _owner_id(cli.state_dir)
