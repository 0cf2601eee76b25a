"""Performance-gated promotion, gate by gate, with ``apply``: a candidate that leaks GPU memory
on an emulated GPU board, and one that holds fewer live streams, each rejected naming its gate
while the running version serves on untouched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker

from controllers.clients.rtvi_client import RtviClient
from controllers.kinds.experiments.runner.hostjob import LABEL_ROLE, ROLE_RUNNER
from emulators.gpuboard.__main__ import UUID
from tests.conftest import Cli, containers_of
from tests.e2e.daemon_helpers import DaemonProcess, status_of, wait_for
from tests.e2e.promotion_helpers import (
    QUALIFICATION,
    RESYNC,
    container_of,
    promoted_spec,
    promotion_of,
    serving,
    small_canary,
)
from tests.ports import free_port
from tests.specs_factory import write


def test_a_candidate_that_leaks_gpu_memory_is_rejected_naming_the_leak(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient, gpu_board: str,
        tmp_path: Path) -> None:
    """On an emulated GPU both versions allocate on: the candidate keeps 2048 MiB after it
    stops, over the 512 allowed, and the running version is left serving."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"
    board = {"RTVI_EMU_GPU_BOARD": gpu_board, "RTVI_EMU_GPU_MIB": "16000"}

    def spec(**env: str) -> dict[str, Any]:
        dep = small_canary(promoted_spec(emulator_image, port, room, 0, **board, **env))
        dep["spec"]["promotion"]["candidate"]["telemetry"] = {
            "dcgmUrl": f"{gpu_board}/metrics", "required": True, "gpus": [UUID],
            "intervalSeconds": 0.5}
        return dep
    write(specs, spec())
    assert cli("apply", str(specs), "--timeout", "120", timeout=200).returncode == 0
    running = container_of(docker_client, cli)
    write(specs, spec(RTVI_EMU_GPU_LEAK_MIB="2048"))
    held = cli("apply", str(specs), "--timeout", "280", timeout=320)
    said = held.stdout + held.stderr
    assert "PromotionRejected" in said, said
    assert "GPU memory: 2048 MiB against not measured" in said, said
    assert container_of(docker_client, cli) == running
    bundle = cli.state_dir / "evidence" / promotion_of(cli)["run"]
    gate = json.loads((bundle / "gates" / "gpu-memory.json").read_text())
    assert (gate["passed"], gate["evidence"]["candidate"]) == (False, "2048 MiB"), gate


def test_a_candidate_that_holds_fewer_streams_is_rejected_naming_capacity(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """The capacity gate: the candidate admits two streams where the running version admits
    three. Each is searched in the room in turn (the running version as a fresh copy of its
    recorded spec), never the running service itself, which serves on untouched."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"

    def spec(**env: str) -> dict[str, Any]:
        dep = small_canary(promoted_spec(emulator_image, port, room, 0, **env))
        gates = dep["spec"]["promotion"]["gates"]
        gates["capacity"] = {"initialStreamCount": 2, "maxStreamCount": 3, "windowSeconds": 5,
                             "maxP95LatencyMs": 5000, "chunkDurationSeconds": 1}
        return dep
    write(specs, spec())
    assert cli("apply", str(specs), "--timeout", "120", timeout=200).returncode == 0
    running = container_of(docker_client, cli)
    write(specs, spec(RTVI_EMU_MAX_STREAMS="2"))
    planned = cli("plan", str(specs))
    assert "at most 0 stream(s) of capacity lost" in planned.stdout, planned.stdout
    held = cli("apply", str(specs), "--timeout", "280", timeout=320)
    said = held.stdout + held.stderr
    assert "PromotionRejected" in said, said
    assert "capacity: 2 streams against 3 streams (at most 0 fewer streams)" in said, said
    assert container_of(docker_client, cli) == running
    assert serving(port)
    bundle = cli.state_dir / "evidence" / promotion_of(cli)["run"]
    for side, highest in (("candidate", 2), ("baseline", 3)):
        searched = json.loads((bundle / "runs" / side / "evidence" / "capacity.json")
                              .read_text())
        assert searched["highestStable"] == highest, searched
    report = (bundle / "report.md").read_text()
    assert "| candidate | 2 | 3 |" in report, report
    # A fresh service per window: the candidate's (after the canary's), then the running
    # version's copies, named apart; the running service was never one of them.
    events = [json.loads(line) for line in (bundle / "events.jsonl").read_text().splitlines()]
    ready = [e["message"] for e in events if e.get("reason") == "ServiceReady"]
    assert len(ready) == 5, ready  # the canary's candidate, 2 windows each side
    assert [("baseline-" in m) for m in ready] == [False] * 3 + [True] * 2, ready
    assert not any(running[0] in json.dumps(e) for e in events)
    assert cli("evidence", promotion_of(cli)["run"], "--verify").returncode == 0


def test_a_runner_killed_mid_qualification_leaves_no_stream_on_the_running_service(
        cli: Cli, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """The qualification adds its baseline streams to the running service, which it does not
    own: it writes that service down before it adds any, so when its runner dies mid-canary
    the recovery deletes those streams there too (and no other: production's are its own)."""
    port, room = free_port(), free_port()
    specs = tmp_path / "specs"
    write(specs, promoted_spec(emulator_image, port, room))
    assert cli("apply", str(specs), "--timeout", "120", timeout=200).returncode == 0
    running = container_of(docker_client, cli)
    production = RtviClient(f"http://127.0.0.1:{port}")
    write(specs, promoted_spec(emulator_image, port, room, RTVI_EMU_FAIL_SEED="7"))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC],
                           tmp_path / "daemon.log")
    try:
        added = wait_for("the qualification's streams on the running service",
                         lambda: [s.id for s in production.list_streams()], 180, interval=0.2)
        (runner,) = containers_of(docker_client, cli.instance, f"{LABEL_ROLE}={ROLE_RUNNER}")
        runner.kill()

        def verdict() -> dict[str, Any] | None:
            found = (status_of(cli, QUALIFICATION) or {}).get("facts", {})
            return found if found.get("result") else None
        facts = wait_for("the qualification recovered", verdict, 180)
    finally:
        daemon.terminate()
        production.close()
    assert facts["result"] == "INCONCLUSIVE", facts
    assert facts["foreign"] == [f"http://127.0.0.1:{port}"], facts
    assert RtviClient(f"http://127.0.0.1:{port}").list_streams() == [], added
    assert container_of(docker_client, cli) == running  # never stopped, never replaced
    assert serving(port)
    cleanup = json.loads((cli.state_dir / "evidence" / facts["runId"] / "gates" / "cleanup.json")
                         .read_text())
    assert cleanup["passed"], cleanup
