"""Secrets are references: a canary value reaches the container's own env and nothing else.

Also: the container's environment is complete and explicit — nothing from the reconciler's
shell leaks in, and a non-EVS Deployment gets no EVS variables.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import docker

from tests.conftest import Cli
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

LABEL_INSTANCE = "rtvi.reconciler/instance"


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_canary_secret_appears_only_in_container_env(
        state_dir: Path, instance: str, emulator_image: str,
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    env_canary = "canary-env-" + secrets.token_hex(12)
    file_canary = "canary-file-" + secrets.token_hex(12)
    shell_leak = "shell-only-" + secrets.token_hex(8)
    secret_file = tmp_path / "hf_token"
    secret_file.write_text(file_canary + "\n")
    cli = Cli(state_dir, instance, {"MY_NGC_KEY": env_canary, "LEAKY_SHELL_VAR": shell_leak})
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port(), secrets=[
        {"name": "NGC_API_KEY", "fromEnv": "MY_NGC_KEY"},
        {"name": "HF_TOKEN", "fromFile": str(secret_file)},
    ]))

    outputs = [cli("validate", str(specs)), cli("plan", str(specs)),
               cli("apply", str(specs)), cli("apply", str(specs)),
               cli("status"), cli("status", "vlm"), cli("status", "vlm", "-o", "json"),
               cli("events"), cli("-v", "plan", str(specs))]
    assert outputs[2].returncode == 0, outputs[2].stdout + outputs[2].stderr

    [container] = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_INSTANCE}={instance}"})
    attrs = container.attrs
    env = dict(item.split("=", 1) for item in attrs["Config"]["Env"])
    # The feature works: the container got both values...
    assert env["NGC_API_KEY"] == env_canary
    assert env["HF_TOKEN"] == file_canary
    # ...and nothing from the reconciler's shell, and no EVS settings for a non-EVS service.
    assert "LEAKY_SHELL_VAR" not in env
    assert shell_leak not in json.dumps(attrs)
    assert not {"VIA_EVS_SESSION", "VLM_VIDEO_PRUNING_RATE", "VLLM_EVS_SIMILARITY_THRESHOLD",
                "VIA_EVS_TOKEN_BUDGET"} & set(env)
    assert env["MODEL_PATH"] == "ngc:nim/nvidia/test-model:1.0"

    del attrs["Config"]["Env"]
    everything = [json.dumps(attrs), json.dumps(container.labels),
                  container.logs().decode(errors="replace"),
                  _all_bytes(state_dir).decode(errors="replace"),
                  *(o.stdout + o.stderr for o in outputs)]
    for canary in (env_canary, file_canary):
        assert all(canary not in text for text in everything)
    assert (state_dir / "reconciler.log").stat().st_size > 0  # logs exist and were searched


def test_missing_secret_is_a_clear_error_and_creates_nothing(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port(), secrets=[
        {"name": "NGC_API_KEY", "fromEnv": "NOT_SET_ANYWHERE_" + secrets.token_hex(4)}]))
    done = cli("apply", str(specs))
    assert done.returncode == 1
    assert "secret NGC_API_KEY: environment variable NOT_SET_ANYWHERE_" in done.stdout
    assert docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_INSTANCE}={instance}"}) == []


def test_missing_secret_on_recreate_keeps_the_running_container(
        state_dir: Path, instance: str, emulator_image: str,
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    """Secrets are resolved before anything is removed: an unset secret costs no service."""
    specs = tmp_path / "specs"
    port = free_port()
    refs = [{"name": "NGC_API_KEY", "fromEnv": "MY_NGC_KEY"}]
    write(specs, deployment("vlm", pinned(emulator_image), port, secrets=refs))
    with_secret = Cli(state_dir, instance, {"MY_NGC_KEY": "k-" + secrets.token_hex(8)})
    assert with_secret("apply", str(specs)).returncode == 0
    [before] = docker_client.containers.list(filters={"label": f"{LABEL_INSTANCE}={instance}"})

    without = Cli(state_dir, instance, {})
    assert without("apply", str(specs)).returncode == 0  # nothing to recreate: no need for it
    write(specs, deployment("vlm", pinned(emulator_image), port, secrets=refs, env={"X": "2"}))
    failed = without("apply", str(specs))
    assert failed.returncode == 1
    assert "MY_NGC_KEY is not set" in failed.stdout + failed.stderr
    [after] = docker_client.containers.list(filters={"label": f"{LABEL_INSTANCE}={instance}"})
    assert after.id == before.id
    assert after.status == "running"
