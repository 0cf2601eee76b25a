"""What the promotion end-to-end tests share: the Deployment with ``spec.promotion`` they
change, and how they read its record, its container and its service."""

from __future__ import annotations

from typing import Any

import docker
import httpx

from state.keys import Key
from tests.conftest import Cli
from tests.e2e.daemon_helpers import status_of
from tests.e2e.stream_helpers import rtvi_deployment

DEPLOYMENT = Key("Deployment", "vlm")
QUALIFICATION = Key("Experiment", "vlm-promotion")
CAMERAS = Key("StreamSet", "cams")  # the StreamSet ``stream_helpers.streamset`` makes
# Captions every second, each answer's latency recorded: what a bake watches.
CAPTIONS = {"prompt": "What colour fills the frame?", "chunkDuration": 1, "maxTokens": 32,
            "maxCaptionAgeSeconds": 30}
REPO = "vss/rt-vlm"
RESYNC = "3600"  # the verdict wakes the Deployment: no resync needed to move on
BAKE_S = 600  # the promoted service is watched this long (the test crashes it well within)


def promoted_spec(image: str, port: int, room: int, bake_s: int = 0, **env: str
                  ) -> dict[str, Any]:
    dep = rtvi_deployment(image, port, **{"RTVI_EMU_LATENCY_MS": "200", **env})
    dep["spec"]["promotion"] = {
        "candidate": {"port": room, "env": {"RTVI_EMU_PORT": str(room)}},
        # The server's own chunk latency: on two cores shared by two services, eight decoders
        # and four publishers, a chunk's receive time moves by hundreds of ms with the load
        # (an equal candidate's p95 was seen 95% above its baseline's), which would decide
        # this test instead of the releases. The slower release is five times slower.
        "gates": {"canary": {"streams": 4, "performanceSeconds": 10, "chunkDurationSeconds": 1,
                             "latencySource": "processing_latency"},
                  "maxP95Regression": "50%"},
        "budgetSeconds": 300, "cleanupSeconds": 30, "bakeSeconds": bake_s}
    return dep


def promotion_of(cli: Cli) -> dict[str, Any]:
    record = status_of(cli, DEPLOYMENT)
    found = (record or {}).get("facts", {}).get("promotion")
    return found if isinstance(found, dict) else {}


def container_of(client: docker.DockerClient, cli: Cli) -> tuple[str, str]:
    record = status_of(cli, DEPLOYMENT)
    assert record is not None
    info = client.containers.get(record["facts"]["containerId"])
    return info.id, info.attrs["State"]["StartedAt"]


def serving(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def phase_of(cli: Cli, phase: str, run_id: str | None = None) -> dict[str, Any] | None:
    found = promotion_of(cli)
    if found.get("phase") != phase or (run_id is not None and found.get("run") != run_id):
        return None
    return found



def small_canary(dep: dict[str, Any]) -> dict[str, Any]:
    """Two streams for 5 s: enough for isolation, dropped chunks, GPU memory and capacity,
    too few chunks for the latency gate (INCONCLUSIVE there, which a FAIL elsewhere outranks),
    for tests that judge another gate."""
    dep["spec"]["promotion"]["gates"]["canary"].update(streams=2, performanceSeconds=5)
    return dep
