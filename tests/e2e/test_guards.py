"""Guards that once survived mutation (issue 14): each test fails when its guard is removed.

1. Stream teardown proves deleted streams are gone from the listing (a stream that refuses
   deletion is left behind and named, its record kept), rather than trusting the batch answer.
2. (tests/contract/test_product_requests.py) The batch delete is sent with ``blocking: true``.
3. Resolved secret values are registered with the redactor: a service that prints its
   configuration (a canary secret included) into the log an experiment keeps as evidence.
4. ``remove_owned`` checks labels before removing: a foreign container that took the name of a
   pending inventory entry survives ``delete``.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import docker

from controllers.kinds.streamset.plan import stream_id
from state.keys import Key
from state.models import InventoryItem, ResourceStatus
from state.store import Store
from tests.conftest import Cli
from tests.e2e.daemon_helpers import status_of
from tests.e2e.stream_helpers import colours, rtvi_deployment, streamset
from tests.e2e.test_experiment import canary
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write


def test_a_stream_that_refuses_deletion_is_left_behind_and_named(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    stuck = stream_id(cli.instance, Key("StreamSet", "cams"), "red")
    fault = {"kind": "stuck_delete", "streams": [stuck]}
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, free_port(), RTVI_EMU_FAULTS=json.dumps([fault])),
          streamset(colours(["RED", "GREEN"]), teardown={"drainTimeoutSeconds": 1,
                                                         "deadlineSeconds": 5}))
    applied = cli("apply", str(specs), "--timeout", "150")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    deleted = cli("delete", "StreamSet/cams", timeout=120)
    assert deleted.returncode == 1, deleted.stdout + deleted.stderr
    assert stuck in deleted.stdout + deleted.stderr
    record = status_of(cli, "StreamSet/cams")
    assert record is not None  # kept: it still owns a stream
    assert any(i["id"] == stuck for i in record["inventory"]), record["inventory"]


def test_a_canary_secret_printed_by_the_service_never_reaches_evidence_or_output(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    value = "canary-secret-" + secrets.token_hex(12)
    secret_file = tmp_path / "service_key"
    secret_file.write_text(value + "\n")
    template = rtvi_deployment(emulator_image, free_port(), RTVI_EMU_ECHO_ENV="SERVICE_KEY")
    template["spec"]["secrets"] = [{"name": "SERVICE_KEY", "fromFile": str(secret_file)}]
    specs = tmp_path / "specs"
    write(specs, template, canary("secret-1", free_port(), streams=2, qualificationOnly=True))
    outputs = [cli("plan", str(specs)), cli("apply", str(specs), "--timeout", "200", timeout=260)]
    assert outputs[1].returncode == 0, outputs[1].stdout + outputs[1].stderr
    log = (cli.state_dir / "evidence" / "secret-1" / "logs" / "service.log").read_text()
    assert "config SERVICE_KEY=***REDACTED***" in log, log[-2000:]  # it was printed, masked
    outputs += [cli("status"), cli("status", "Experiment/canary", "-o", "json"), cli("events"),
                cli("evidence", "secret-1", "--verify"), cli("evidence", "secret-1", "-o", "json")]
    for done in outputs:
        assert value not in done.stdout + done.stderr
    for path in cli.state_dir.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path
    for container in docker_client.containers.list(all=True, filters={"label": [
            f"rtvi.reconciler/instance={cli.instance}"]}):
        assert value not in json.dumps(container.labels)


def test_a_foreign_container_with_a_pending_entrys_name_survives_delete(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    assert cli("apply", str(specs)).returncode == 0
    name = f"rtvi-{instance}-vlm"
    docker_client.containers.get(name).remove(force=True)
    # A crash between the write-ahead entry and the create call: the entry has no ID yet.
    store = Store(cli.state_dir)

    def pending(st: ResourceStatus) -> None:
        st.inventory = [InventoryItem(kind="container", name=name, host="local",
                                      state="pending", created_at="2026-01-01T00:00:00Z")]
    store.update(Key("Deployment", "vlm"), pending)
    foreign = docker_client.containers.create(emulator_image, name=name, command=["true"],
                                              labels={"rtvi.test": "1"})
    try:
        deleted = cli("delete", "Deployment/vlm")
        assert "not ours" in deleted.stdout + deleted.stderr, deleted.stdout + deleted.stderr
        foreign.reload()
        assert foreign.status == "created"  # untouched
    finally:
        foreign.remove(force=True)
