"""Odd secrets stay secret, odd secret files are refused quickly, and a replacement that cannot
be created never costs the working container (issue 9, finding 3).

Canaries are planted only through spec references (``fromEnv``, ``fromFile``); the test never
registers them with a redactor itself, so these tests fail if ``controllers.secrets`` stopped
registering what it resolves.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import docker
import pytest

from controllers.secrets import SECRET_FILE_MAX_BYTES
from state import MASK
from state.redaction import go_quoted
from tests.conftest import Cli, containers_of
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

APPLY_TIMEOUT_S = 5
# "Fails within --timeout": the CLI's own start-up (Python, Docker connection) comes on top.
TIMEOUT_SLACK_S = 25
HUNG_CLI_S = 120  # the old code blocked forever on a FIFO; give up on it long before that
STAGED_SUFFIX = ".next"


def _forms(value: str) -> set[str]:
    """How a value may be printed: raw, JSON, repr, ascii, and Go's %q as Docker quotes."""
    return {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
            repr(value)[1:-1], ascii(value)[1:-1], go_quoted(value),
            go_quoted(value, ascii_only=True)}


def _state_text(state_dir: Path) -> str:
    files = [p for p in sorted(state_dir.rglob("*")) if p.is_file()]
    assert {"events.jsonl", "reconciler.log"} <= {p.name for p in files}
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in files)


def _assert_nowhere(canary_token: str, value: str, texts: list[str]) -> None:
    """The random token is ASCII letters and digits: no encoding changes it, so finding it
    anywhere is a leak of some form; the explicit forms are searched too, for the record."""
    for text in texts:
        assert canary_token not in text
        for form in _forms(value):
            assert form not in text


def test_hostile_canaries_reach_no_output(state_dir: Path, instance: str, emulator_image: str,
                                          docker_client: docker.DockerClient,
                                          tmp_path: Path) -> None:
    nul_token, quote_token, fatal_token = (secrets.token_hex(12) for _ in range(3))
    nul_value = f"nul-{nul_token}\x00after-the-nul"
    quote_value = f"q-{quote_token}\"'\\\\n\u00e9\u2603\t\U0001f511"
    # The emulator prints RTVI_EMU_FATAL in a fatal log line, which the readiness wait quotes
    # in its failure: a real path by which a resolved value reaches our outputs.
    fatal_value = f"EngineDeadError fatal-{fatal_token}\"'\\\u00e9\u2603"
    nul_file, quote_file = tmp_path / "nul_token", tmp_path / "quote_token"
    nul_file.write_bytes(nul_value.encode() + b"\n")
    quote_file.write_bytes(quote_value.encode() + b"\n")
    cli = Cli(state_dir, instance, {"CANARY_FATAL": fatal_value})
    nul_specs, fatal_specs = tmp_path / "nul", tmp_path / "fatal"
    nul_path = write(nul_specs, deployment("nul", pinned(emulator_image), free_port(), secrets=[
        {"name": "HF_TOKEN", "fromFile": str(nul_file)}]))
    write(fatal_specs, deployment("fatal", pinned(emulator_image), free_port(), secrets=[
        {"name": "HF_TOKEN", "fromFile": str(quote_file)},
        {"name": "RTVI_EMU_FATAL", "fromEnv": "CANARY_FATAL"}]))

    runs = {
        "validate-nul": cli("validate", str(nul_specs)),
        "plan-nul": cli("plan", str(nul_specs)),
        "apply-nul": cli("-v", "apply", str(nul_specs)),
        "validate-fatal": cli("validate", str(fatal_specs)),
        "plan-fatal": cli("plan", str(fatal_specs)),
        "apply-fatal": cli("-v", "apply", str(fatal_specs)),
    }
    runs |= {"status": cli("status"), "status-json": cli("status", "-o", "json"),
             "status-fatal": cli("status", "fatal", "-o", "json"),
             "events": cli("events"), "events-json": cli("events", "-o", "json")}

    # The NUL secret is refused at plan time, naming the reference (located) and not the value.
    secret_line = next(n for n, line in enumerate(nul_path.read_text().splitlines(), 1)
                       if line.strip() == "secrets:") + 1
    for verb in ("plan-nul", "apply-nul"):
        done = runs[verb]
        text = done.stdout + done.stderr
        assert done.returncode == 1, text
        assert f"{nul_path}:{secret_line}:" in text
        assert "secret HF_TOKEN" in text
        assert "control character(s) NUL" in text
        assert str(nul_file) in text
    assert all(c.name != f"rtvi-{instance}-nul" for c in containers_of(docker_client, instance))
    # The fatal canary did reach an output path and was masked there: proof the resolved
    # value was registered with the redactor by the code under test.
    applied = runs["apply-fatal"]
    assert applied.returncode == 1, applied.stdout
    assert "FatalLogMarker" in applied.stdout, applied.stdout
    assert MASK in applied.stdout
    assert runs["validate-nul"].returncode == 0
    assert runs["validate-fatal"].returncode == 0

    texts = [_state_text(state_dir), *(r.stdout + r.stderr for r in runs.values())]
    for token, value in ((nul_token, nul_value), (quote_token, quote_value),
                         (fatal_token, fatal_value)):
        _assert_nowhere(token, value, texts)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "too-large"])
def test_odd_secret_file_is_refused_quickly_and_changes_nothing(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path, kind: str) -> None:
    path = tmp_path / "secret"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"x" * (SECRET_FILE_MAX_BYTES + 1))
    expected = {"fifo": "is a FIFO", "dev-zero": "is a character device",
                "directory": "is a directory", "too-large": "is larger than"}[kind]
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port(), secrets=[
        {"name": "HF_TOKEN", "fromFile": str(path)}]))
    started = time.monotonic()
    # /dev is outside the folders the tests' trust file allows: let this run read there, so
    # the read itself is what refuses the device.
    allow = ("--allow-read", "secrets=/dev") if kind == "dev-zero" else ()
    done = cli(*allow, "apply", str(specs), "--timeout", str(APPLY_TIMEOUT_S),
               timeout=HUNG_CLI_S)
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    text = done.stdout + done.stderr
    assert f"secret HF_TOKEN: {path} {expected}" in text
    assert "nothing was changed" in text
    assert "Traceback" not in text
    assert elapsed < APPLY_TIMEOUT_S + TIMEOUT_SLACK_S
    assert containers_of(docker_client, instance) == []


def test_working_container_survives_a_replacement_the_engine_refuses(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """A bind mount whose source does not exist passes validate and plan; Docker refuses the
    create. The running container must be untouched, and no staged container left over."""
    specs, port = tmp_path / "specs", free_port()
    write(specs, deployment("vlm", pinned(emulator_image), port))
    assert cli("apply", str(specs)).returncode == 0
    [before] = containers_of(docker_client, instance)
    write(specs, deployment("vlm", pinned(emulator_image), port, mounts=[
        {"source": str(tmp_path / "no-such-dir"), "target": "/opt/data"}]))
    done = cli("apply", str(specs))
    assert done.returncode == 1, done.stdout
    assert "container create failed" in done.stdout, done.stdout
    [after] = containers_of(docker_client, instance)
    assert after.id == before.id
    assert after.status == "running"
    status = json.loads(cli("status", "vlm", "-o", "json").stdout)
    assert [i["name"] for i in status["inventory"]] == [before.name]


def test_leftover_staged_container_is_cleaned_up_and_a_foreign_one_left_alone(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """What a kill -9 between staging and renaming leaves: a created, never started container
    under the staged name with our labels. The next recreate removes it and stages afresh."""
    specs, port = tmp_path / "specs", free_port()
    write(specs, deployment("vlm", pinned(emulator_image), port))
    assert cli("apply", str(specs)).returncode == 0
    [running] = containers_of(docker_client, instance)
    staged = running.name + STAGED_SUFFIX
    leftover = docker_client.containers.create(emulator_image, name=staged,
                                               labels=running.labels)
    write(specs, deployment("vlm", pinned(emulator_image), port, env={"X": "2"}))
    done = cli("apply", str(specs))
    assert done.returncode == 0, done.stdout + done.stderr
    [final] = containers_of(docker_client, instance)
    assert final.name == running.name
    assert final.id not in (running.id, leftover.id)

    foreign = docker_client.containers.create(emulator_image, name=staged,
                                              labels={"rtvi.test": "1"})
    try:
        write(specs, deployment("vlm", pinned(emulator_image), port, env={"X": "3"}))
        refused = cli("apply", str(specs))
        assert refused.returncode == 1, refused.stdout
        assert "is not ours" in refused.stdout, refused.stdout
        foreign.reload()
        [still] = containers_of(docker_client, instance)
        assert still.id == final.id
        assert still.status == "running"
    finally:
        foreign.remove(force=True)
