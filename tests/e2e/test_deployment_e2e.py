"""A Deployment converges on a real Docker engine through the real CLI (issue 2).

The RT-VLM service is the project's emulator image, built here without a registry and run as
a real container published on 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from controllers.waiting import until
from state.store import Store
from tests.conftest import Cli, containers_of
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

LABEL_INSTANCE = "rtvi.reconciler/instance"


def _ours(client: docker.DockerClient, instance: str) -> list[docker.models.containers.Container]:
    return containers_of(client, instance)


def _status(cli: Cli, name: str) -> dict[str, object]:
    done = cli("status", name, "-o", "json")
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def _ready(status: dict[str, object]) -> dict[str, str]:
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    return next(c for c in conditions if c["type"] == "Ready")


def test_apply_converges_and_repairs(cli: Cli, instance: str, emulator_image: str,
                                     docker_client: docker.DockerClient, tmp_path: Path) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), port))
    name = f"rtvi-{instance}-vlm"

    plan = cli("plan", str(specs))
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert "create container " + name in plan.stdout
    assert "new Deployment" in plan.stdout

    first = cli("apply", str(specs))
    assert first.returncode == 0, first.stdout + first.stderr
    [container] = _ours(docker_client, instance)
    assert container.name == name
    assert container.status == "running"
    labels = container.labels
    assert labels["rtvi.reconciler/managed-by"] == "rtvi-reconciler"
    assert labels["rtvi.reconciler/resource"] == "Deployment/vlm"
    assert len(labels["rtvi.reconciler/spec-hash"]) == 64
    bindings = container.attrs["HostConfig"]["PortBindings"]["8000/tcp"]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    status = _status(cli, "vlm")
    assert _ready(status)["status"] == "True"
    facts = status["facts"]
    assert isinstance(facts, dict)
    assert facts["imageId"] == emulator_image
    assert facts["model"] == "vllm-compatible"
    assert facts["runtime"]["mode"] == "cuda-graph"
    assert status["observed_generation"] == labels["rtvi.reconciler/spec-hash"]

    # Again: no action, same container, plan says in sync.
    again = cli("apply", str(specs))
    assert again.returncode == 0
    assert "(no changes)" in again.stdout
    assert [c.id for c in _ours(docker_client, instance)] == [container.id]
    assert cli("plan", str(specs)).returncode == 0

    # Change one env value: exactly one recreate, with a cause naming the field.
    write(specs, deployment("vlm", pinned(emulator_image), port,
                            env={"RTVI_EMU_MAX_MODEL_LEN": 8192}))
    changed = cli("apply", str(specs))
    assert changed.returncode == 0, changed.stdout + changed.stderr
    [recreated] = _ours(docker_client, instance)
    assert recreated.id != container.id
    history = _status(cli, "vlm")["history"]
    assert isinstance(history, list)
    assert [h["action"] for h in history] == ["create", "recreate"]
    assert "env.RTVI_EMU_MAX_MODEL_LEN unset → '8192'" in history[-1]["cause"]
    assert _status(cli, "vlm")["facts"]["runtime"]["max_model_len"] == "8192"  # type: ignore[index]

    # Remove the container by hand: the next apply recreates it and says why.
    recreated.remove(force=True)
    plan = cli("plan", str(specs))
    assert plan.returncode == 2
    assert "removed outside the reconciler" in plan.stdout
    assert cli("apply", str(specs)).returncode == 0
    assert len(_ours(docker_client, instance)) == 1

    # A stopped container is drift too.
    _ours(docker_client, instance)[0].stop(timeout=2)
    repaired = cli("apply", str(specs))
    assert repaired.returncode == 0
    assert ("exited with code" in repaired.stderr
            or "was killed by SIGTERM (exit code 143)" in repaired.stderr), repaired.stderr
    [final] = _ours(docker_client, instance)
    assert final.status == "running"

    events = cli("events", "vlm")
    assert events.returncode == 0
    # create, recreate (env), create (removed by hand), recreate (stopped)
    assert events.stdout.count("Created:") == 2
    assert events.stdout.count("Recreated:") == 2


def test_foreign_container_is_conflict_and_survives_delete(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("mine", pinned(emulator_image), free_port()),
          deployment("taken", pinned(emulator_image), free_port()))
    foreign = docker_client.containers.run(emulator_image, name=f"rtvi-{instance}-taken",
                                           detach=True, init=True, labels={"rtvi.test": "1"})
    done = cli("apply", str(specs))
    assert done.returncode == 1
    assert "Conflict" in done.stdout
    assert "not ours" in done.stdout
    assert _ready(_status(cli, "taken"))["reason"] == "Conflict"
    assert _ready(_status(cli, "mine"))["status"] == "True"
    foreign.reload()
    assert foreign.status == "running"
    assert not foreign.labels.get(LABEL_INSTANCE)

    deleted = cli("delete", str(specs))
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert _ours(docker_client, instance) == []
    foreign.reload()
    assert foreign.status == "running"
    assert cli("status", "mine").returncode == 1  # the record is pruned with the container
    foreign.remove(force=True)


def test_delete_by_name(cli: Cli, instance: str, emulator_image: str,
                        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    assert cli("apply", str(specs)).returncode == 0
    assert cli("delete", "vlm").returncode == 0
    assert _ours(docker_client, instance) == []


def test_startup_longer_than_timeout_fails_with_readiness_reason(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("slow", pinned(emulator_image), free_port(),
                            env={"RTVI_EMU_STARTUP_DELAY_S": 600}))
    done = cli("apply", str(specs), "--timeout", "3")
    assert done.returncode == 1
    assert "ReadinessTimeout" in done.stdout
    assert "/v1/health/ready answered 503" in done.stdout
    assert "waiting for readiness" in done.stderr  # progress while waiting
    assert _ready(_status(cli, "slow"))["reason"] == "ReadinessTimeout"


@pytest.mark.parametrize("exits", ["1", "0"], ids=["marker-then-exit", "marker-keeps-running"])
def test_fatal_marker_fails_fast(cli: Cli, emulator_image: str, tmp_path: Path,
                                 exits: str) -> None:
    specs = tmp_path / "specs"
    env = {"RTVI_EMU_STARTUP_DELAY_S": 600, "RTVI_EMU_FATAL": "CUDA out of memory",
           "RTVI_EMU_FATAL_EXIT": exits}
    spec = deployment("oom", pinned(emulator_image), free_port(), env=env)
    spec["spec"]["readiness"]["timeoutSeconds"] = 600
    write(specs, spec)
    started = time.monotonic()
    done = cli("apply", str(specs))
    elapsed = time.monotonic() - started
    assert done.returncode == 1
    assert "'CUDA out of memory'" in done.stdout, done.stdout
    assert elapsed < 120  # fail fast: a fraction of the 600 s budget, not the budget
    assert _ready(_status(cli, "oom"))["reason"] == "FatalLogMarker"


def test_kill_9_mid_apply_then_apply_again(cli: Cli, instance: str, emulator_image: str,
                                          docker_client: docker.DockerClient,
                                          tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port(),
                            env={"RTVI_EMU_STARTUP_DELAY_S": 3}))
    proc = cli.popen("apply", str(specs))

    def created() -> list[Any] | None:
        assert proc.poll() is None  # still applying: the kill comes mid-apply
        return _ours(docker_client, instance) or None
    assert until(created, timeout_s=60, pace=0.05), "no container within 60 s"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = cli("apply", str(specs))
    assert done.returncode == 0, done.stdout + done.stderr
    containers = _ours(docker_client, instance)
    assert len(containers) == 1
    assert containers[0].status == "running"
    assert _ready(_status(cli, "vlm"))["status"] == "True"


def test_second_writer_is_refused_while_lock_is_held(cli: Cli, state_dir: Path,
                                                     emulator_image: str,
                                                     tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    store = Store(state_dir)
    store.instance(cli.instance)
    with store.lock():
        done = cli("apply", str(specs))
    assert done.returncode == 1
    assert "locked" in done.stderr


@pytest.mark.parametrize("case_id", ["unknown-field", "bad-digest", "eager-without-reasons",
                                     "env-value-nul"])
def test_bad_input_changes_nothing(cli: Cli, instance: str, state_dir: Path, case_id: str,
                                   docker_client: docker.DockerClient, tmp_path: Path) -> None:
    from tests.specs.cases import CASES

    case = next(c for c in CASES if c.id == case_id)
    spec = tmp_path / "bad.yaml"
    spec.write_text(case.text)
    for command in ("validate", "plan", "apply"):
        done = cli(command, str(spec))
        assert done.returncode == 1
        assert f"{spec}:{case.line}:" in done.stderr
        assert case.rule in done.stderr
    assert _ours(docker_client, instance) == []
    assert Store(state_dir).list() == []
    assert Store(state_dir).events.read() == []


def test_gpu_the_host_lacks_is_refused_at_plan_time_and_changes_nothing(
        cli: Cli, instance: str, state_dir: Path, emulator_image: str,
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    """This machine has no nvidia-smi: it has no GPUs, so GPU 0 does not exist here."""
    specs = tmp_path / "specs"
    path = write(specs, deployment("vlm", pinned(emulator_image), free_port(), gpus=[0]),
                 deployment("fine", pinned(emulator_image), free_port()))
    line = 1 + next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                    if text.strip() == "gpus:")  # the error points at the item "- 0"
    assert cli("validate", str(specs)).returncode == 0  # well-formed; only the Host says no
    for command in ("plan", "apply"):
        done = cli(command, str(specs))
        assert done.returncode == 1
        text = done.stdout + done.stderr
        assert f"{path}:{line}:" in text
        assert "spec.gpus.0" in text
        assert "rule 10" in text
        assert "has no GPU 0" in text
    assert _ours(docker_client, instance) == []
    assert Store(state_dir).list() == []
    assert Store(state_dir).events.read() == []


def test_an_absent_image_from_a_registry_the_operator_does_not_allow_is_refused_at_plan(
        cli: Cli, tmp_path: Path) -> None:
    """A pull is code the spec chose, run on the Host: only from the operator's registries
    (the tests' trust file allows loopback ones; this image is on Docker Hub)."""
    specs = tmp_path / "specs"
    missing = "rtvi-emulator@sha256:" + "0" * 64
    write(specs, deployment("vlm", missing, free_port()))
    for command in ("plan", "apply"):
        done = cli(command, str(specs))
        assert done.returncode == 1
        assert ": it is not on Host local, and registry docker.io is not one images may " \
            "be pulled from (127.0.0.1;" in done.stdout + done.stderr
    assert Store(cli.state_dir).events.read() == []


def test_custom_model_implementation_must_exist_in_image(cli: Cli, emulator_image: str,
                                                         docker_client: docker.DockerClient,
                                                         tmp_path: Path) -> None:
    """Rule 4 is judged against the image's real filesystem (or a declared mount)."""
    specs = tmp_path / "specs"
    custom = {"use": "custom", "path": "ngc:nim/nvidia/m:1"}
    write(specs, deployment("vlm", pinned(emulator_image), free_port(),
                            model=dict(custom, implementationPath="/opt/emu/emulators/rtvi")))
    assert cli("plan", str(specs)).returncode == 2
    write(specs, deployment("vlm", pinned(emulator_image), free_port(),
                            model=dict(custom, implementationPath="/opt/not-there")))
    done = cli("plan", str(specs))
    assert done.returncode == 1
    assert "rule 4" in done.stdout
    assert "/opt/not-there" in done.stdout
    assert docker_client.containers.list(all=True, filters={"label": "rtvi.reconciler/probe"}) == []
    write(specs, deployment("vlm", pinned(emulator_image), free_port(),
                            model=dict(custom, implementationPath="/opt/impl/model.py"),
                            mounts=[{"source": str(tmp_path), "target": "/opt/impl"}]))
    assert cli("plan", str(specs)).returncode == 2


def test_tag_moving_to_a_new_image_recreates_with_digest_cause(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """profile: exploration may follow a tag; when the tag moves, the resolved image ID does."""
    from emulators.image import build_emulator_image

    tag = f"rtvi-emulator:{instance}"
    docker_client.images.get(emulator_image).tag(tag)
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", tag, free_port(), profile="exploration"))
    try:
        assert cli("apply", str(specs)).returncode == 0
        rebuilt = build_emulator_image(tag, labels={"rtvi.test.rebuild": instance})
        assert rebuilt != emulator_image
        done = cli("apply", str(specs))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"image changed {emulator_image[:19]}.. → {rebuilt[:19]}.." in done.stderr
        [container] = _ours(docker_client, instance)
        assert container.attrs["Image"] == rebuilt
    finally:
        for container in _ours(docker_client, instance):
            container.remove(force=True)
        docker_client.images.remove(tag, force=True)


def test_a_health_blip_on_a_proven_service_writes_nothing(
        cli: Cli, instance: str, emulator_image: str, tmp_path: Path) -> None:
    """A converged service whose one steady-state health check fails (a slow answer under
    load) is proven ready again before anything is said: no Progressing flap, no rewrite of
    its record, no runtime facts lost to a log follower that had not caught up."""
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), port))
    assert cli("apply", str(specs)).returncode == 0
    record = cli.state_dir / "resources" / "Deployment" / "vlm.json"
    before = record.read_bytes()
    fault = {"path_prefix": "/v1/health/ready", "status": 503, "count": 2}
    answer = httpx.post(f"http://127.0.0.1:{port}/emulator/faults", json=fault, timeout=5)
    assert answer.status_code == 200, answer.text

    again = cli("apply", str(specs))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(no changes)" in again.stdout
    state = httpx.get(f"http://127.0.0.1:{port}/emulator/state", timeout=5).json()
    assert state["requests"]["GET /v1/health/ready"] >= 2  # the blip was met, then re-proven
    assert record.read_bytes() == before
