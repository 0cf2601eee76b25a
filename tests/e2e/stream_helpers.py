"""Shared pieces of the StreamSet tests: spec documents, the VST emulator process, RTVI's
emulator-only admin API, and reading per-source status.

The RTVI emulator runs as the Deployment's container with host networking (it must reach RTSP
sources published on 127.0.0.1); VST runs as a process under Debian's python3 (it needs ``gi``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from controllers.kinds.streamset.facts import StreamSetStatusFacts
from tests.conftest import Cli
from tests.e2e.daemon_helpers import wait_for
from tests.ports import free_port
from tests.specs_factory import deployment, pinned

REPO_ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
VST_API = "/vst/api/v1"
SMALL = {"width": 160, "height": 120, "fps": 5}
PALETTE8 = ["RED", "GREEN", "BLUE", "YELLOW", "CYAN", "MAGENTA", "WHITE", "ORANGE"]
PALETTE_ALL = [*PALETTE8, "BLACK", "PURPLE", "GRAY"]


def rtvi_deployment(image_id: str, port: int, **env: str) -> dict[str, Any]:
    """The RTVI emulator as a Deployment on the Host's network, listening on ``port``."""
    # On the Host's network the service must bind loopback only, never every interface.
    knobs = {"RTVI_EMU_HOST": "127.0.0.1", "RTVI_EMU_PORT": str(port), "RTVI_EMU_ACCESS_LOG": "0",
             **env}
    dep = deployment("vlm", pinned(image_id), port, network="host", env=knobs)
    dep["spec"]["port"] = {"host": port, "container": port}
    return dep


def streamset(sources: list[dict[str, Any]], vst_url: str | None = None,
              captions: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deployment": "vlm", "publisher": dict(SMALL), "sources": sources,
                            "readiness": {"timeoutSeconds": 90, "maxFrameAgeSeconds": 15}}
    if vst_url is not None:
        body["vst"] = {"url": vst_url, "urlTimeoutSeconds": 30}
    if captions is not None:
        body["captions"] = captions
    body.update(spec)
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "StreamSet",
            "metadata": {"name": "cams"}, "spec": body}


def colours(names: list[str]) -> list[dict[str, Any]]:
    return [{"name": n.lower(), "synthetic": {"colour": n}} for n in names]


class Rtvi:
    """The RTVI emulator's public API plus its emulator-only admin API."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> Any:
        response = httpx.get(self.url + path, timeout=10)
        response.raise_for_status()
        return response.json()

    def streams(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = self.get("/v1/streams/get-stream-info")
        return listed

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.get("/emulator/state")
        return state

    def knobs(self, **values: Any) -> None:
        httpx.post(self.url + "/emulator/knobs", json=values, timeout=10).raise_for_status()

    def calls(self, route: str) -> int:
        return int(self.state().get("requests", {}).get(route, 0))


class Vst:
    def __init__(self, http_port: int, rtsp_port: int) -> None:
        self.url = f"http://127.0.0.1:{http_port}{VST_API}"
        self.admin = f"http://127.0.0.1:{http_port}/emulator"
        self.rtsp_port = rtsp_port

    def sensors(self) -> list[dict[str, Any]]:
        response = httpx.get(self.url + "/sensor/list", timeout=10)
        response.raise_for_status()
        return [s for s in response.json() if s.get("state") != "removed"]

    def drop(self, sensor_id: str, restore: bool = False) -> None:
        verb = "restore" if restore else "drop"
        httpx.post(f"{self.admin}/sensors/{sensor_id}/{verb}", timeout=10).raise_for_status()


@contextmanager
def vst_process(log_dir: Path, **knobs: str) -> Iterator[Vst]:
    """The VST emulator on free loopback ports, ready when ``/sensor/version`` answers;
    ``knobs``: more of its env (e.g. ``VST_EMU_URL_DELAY_S``)."""
    http_port, rtsp_port = free_port(), free_port()
    env = {**os.environ, "VST_EMU_HTTP_PORT": str(http_port), "VST_EMU_RTSP_PORT":
           str(rtsp_port), "VST_EMU_HOST": "127.0.0.1", "PYTHONPATH": str(REPO_ROOT), **knobs}
    log = (log_dir / "vst.log").open("wb")
    process = subprocess.Popen([SYSTEM_PYTHON, "-m", "emulators.vst"], cwd=REPO_ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    vst = Vst(http_port, rtsp_port)
    try:
        def answers() -> bool:
            assert process.poll() is None, f"VST emulator exited ({process.returncode})"
            return _answers(vst.url + "/sensor/version")
        wait_for("the VST emulator to answer", answers, 20, 0.1)
        yield vst
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == httpx.codes.OK
    except httpx.HTTPError:
        return False


def status(cli: Cli, resource: str) -> dict[str, Any]:
    done = cli("status", resource, "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def condition(data: dict[str, Any], kind: str) -> dict[str, str]:
    found: dict[str, str] = next(c for c in data["conditions"] if c["type"] == kind)
    return found


def sources(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    StreamSetStatusFacts.model_validate(data["facts"])  # strict: every key known, typed
    found: dict[str, dict[str, Any]] = data["facts"]["sources"]
    return found
