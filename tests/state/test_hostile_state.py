"""A corrupt, mistyped or planted state directory never gives a traceback (issue 9, finding 6).

Table-driven over the ways a state file can be unusable: each variant is planted beside a good
record, then every reading command runs through the real CLI. Each must name the file and what
is wrong, never print a traceback; ``status`` still shows the good record and exits 1; a command
that would act (``plan``, ``apply``) changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from state.models import ResourceStatus
from state.store import Store
from tests.conftest import Cli, containers_of
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

CLI_TIMEOUT_S = 60  # a FIFO read used to block forever: fail the test, do not hang it
OUTSIDE_MARKER = "read-through-a-link"
GOOD = "Host/local"
ALL_COMMANDS = ("status", "status-json", "status-name", "plan", "apply", "events")
RESOURCE_COMMANDS = ("status", "status-json", "status-name", "plan", "apply")
NOT_OURS = ("Traceback", "Error:\n", "most recent call last")


def _status_json(resource: str, message: str = "") -> bytes:
    kind, name = resource.split("/")
    status = ResourceStatus(resource=resource, kind=kind, name=name)
    status.set_condition("Ready", "True", "Ready", message)
    return status.model_dump_json().encode()


def _vlm(state: Path) -> Path:
    return state / "resources" / "Deployment" / "vlm.json"


def _plant_file(content: bytes) -> Callable[[Path, Path], None]:
    def plant(state: Path, _outside: Path) -> None:
        _vlm(state).parent.mkdir(parents=True, exist_ok=True)
        _vlm(state).write_bytes(content)
    return plant


def _plant_dir(relative: str) -> Callable[[Path, Path], None]:
    def plant(state: Path, _outside: Path) -> None:
        (state / relative).mkdir(parents=True)
    return plant


def _plant_link(relative: str, content: bytes, directory: bool = False
                ) -> Callable[[Path, Path], None]:
    """``relative`` becomes a symlink to a file (or a folder holding vlm.json) outside."""
    def plant(state: Path, outside: Path) -> None:
        target = outside / "elsewhere"
        if directory:
            target.mkdir()
            (target / "vlm.json").write_bytes(content)
        else:
            target.write_bytes(content)
        (state / relative).parent.mkdir(parents=True, exist_ok=True)
        (state / relative).symlink_to(target)
    return plant


def _plant_kind_file(state: Path, _outside: Path) -> None:
    (state / "resources" / "Deployment").write_text("not a folder\n")


def _plant_fifo(state: Path, _outside: Path) -> None:
    _vlm(state).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(_vlm(state))


@dataclass(frozen=True)
class Variant:
    plant: Callable[[Path, Path], object]
    broken: str  # path relative to the state dir that every failing command must name
    fails: tuple[str, ...]  # commands that must exit non-zero


OUTSIDE_EVENT = json.dumps({"seq": 1, "time": "2026-01-01T00:00:00.000Z", "resource": GOOD,
                            "type": "Normal", "reason": "Planted", "message": OUTSIDE_MARKER})
VLM_FILE = "resources/Deployment/vlm.json"
VARIANTS = {
    "invalid-json": Variant(_plant_file(b'{"resource": "Deploy'), VLM_FILE, RESOURCE_COMMANDS),
    "json-array": Variant(_plant_file(b"[1, 2]"), VLM_FILE, RESOURCE_COMMANDS),
    "wrong-types": Variant(_plant_file(json.dumps(
        {"resource": "Deployment/vlm", "kind": "Deployment", "name": "vlm",
         "conditions": "all fine", "history": 7}).encode()), VLM_FILE, RESOURCE_COMMANDS),
    "huge-number": Variant(_plant_file(
        b'{"resource": "Deployment/vlm", "kind": "Deployment", "name": "vlm", "facts": {"n": 1'
        + b"0" * 5000 + b"}}"), VLM_FILE, RESOURCE_COMMANDS),
    "deep-nesting": Variant(_plant_file(
        b'{"resource": "Deployment/vlm", "kind": "Deployment", "name": "vlm", "facts": {"n": '
        + b"[" * 100_000 + b"]" * 100_000 + b"}}"), VLM_FILE, RESOURCE_COMMANDS),
    "invalid-utf8": Variant(_plant_file(b'{"resource": "Deployment/\xff\xfe"}'), VLM_FILE,
                            RESOURCE_COMMANDS),
    "empty": Variant(_plant_file(b""), VLM_FILE, RESOURCE_COMMANDS),
    "resource-mismatch": Variant(_plant_file(_status_json("Deployment/other")), VLM_FILE,
                                 RESOURCE_COMMANDS),
    "directory": Variant(_plant_dir(VLM_FILE), VLM_FILE, RESOURCE_COMMANDS),
    "fifo": Variant(_plant_fifo, VLM_FILE, RESOURCE_COMMANDS),
    "symlink": Variant(_plant_link(VLM_FILE, _status_json("Deployment/vlm", OUTSIDE_MARKER)),
                       VLM_FILE, RESOURCE_COMMANDS),
    "kind-is-a-file": Variant(_plant_kind_file, "resources/Deployment", RESOURCE_COMMANDS),
    "kind-is-a-link": Variant(_plant_link("resources/Deployment", _status_json(
        "Deployment/vlm", OUTSIDE_MARKER), directory=True), "resources/Deployment",
        RESOURCE_COMMANDS),
    "events-is-a-directory": Variant(_plant_dir("events.jsonl"), "events.jsonl", ALL_COMMANDS),
    "events-is-a-link": Variant(_plant_link("events.jsonl", OUTSIDE_EVENT.encode() + b"\n"),
                                "events.jsonl", ALL_COMMANDS),
    "instance-is-a-directory": Variant(_plant_dir("instance.json"), "instance.json",
                                       RESOURCE_COMMANDS),
    "instance-is-an-array": Variant(
        lambda state, _o: (state / "instance.json").write_text('["default"]'), "instance.json",
        ("plan", "apply")),
    "log-is-a-link": Variant(_plant_link("reconciler.log", b""), "reconciler.log",
                             RESOURCE_COMMANDS),
    "lock-is-a-directory": Variant(_plant_dir("lock"), "lock", RESOURCE_COMMANDS),
}


def _run(cli: Cli, command: str, specs: Path, name: str) -> tuple[int, str, str]:
    args = {"status": ("status",), "status-json": ("status", "-o", "json"),
            "status-name": ("status", name), "plan": ("plan", str(specs)),
            "apply": ("apply", "--timeout", "30", str(specs)), "events": ("events",)}[command]
    done = cli(*args, timeout=CLI_TIMEOUT_S)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("variant_id", sorted(VARIANTS))
def test_every_command_names_the_unusable_file(
        variant_id: str, cli: Cli, state_dir: Path, instance: str, emulator_image: str,
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    variant = VARIANTS[variant_id]
    outside = tmp_path / "outside"
    outside.mkdir()
    Store(state_dir).save(ResourceStatus(resource=GOOD, kind="Host", name="local"))
    variant.plant(state_dir, outside)
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    broken = str(state_dir / variant.broken)
    # status NAME asks for the broken record, or (when the record files are fine) the good one.
    name = "vlm" if variant.broken.startswith("resources") else GOOD

    for command in ALL_COMMANDS:
        code, out, err = _run(cli, command, specs, name)
        where = f"{variant_id}: {command} (exit {code})\nstdout: {out}\nstderr: {err}"
        assert not any(marker in out + err for marker in NOT_OURS), where
        assert OUTSIDE_MARKER not in out + err, where  # nothing read through a link
        if command in variant.fails:
            assert code == 1, where
            assert broken in err, where
        else:
            assert code == 0, where
        if command == "status" and variant.broken.startswith("resources"):
            assert GOOD in out, where  # the good record is still shown
        if command == "status-json" and variant.broken.startswith("resources"):
            assert [r["resource"] for r in json.loads(out)] == [GOOD], where
    assert containers_of(docker_client, instance) == []  # apply changed nothing
