"""The VST emulator's HTTP API served from a thread of the test process, relaying nothing.

Why: the sensor steps of stream teardown (delete by recorded ID, adopt a pending sensor by its
deterministic name, leave it on record when VST cannot be reached) belong in the fast layer.
The emulator's inventory takes its relay as a parameter; here it is one that mounts nothing, so
no GStreamer is needed. Frames through VST are proven by the services layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from emulators.vst import api
from emulators.vst.knobs import load_knobs
from emulators.vst.sensors import Inventory
from emulators.vst.server import ApiServer
from emulators.vst.source import Source
from tests.serving import served


class NoRelay:
    """Mounts nothing; remembers what is mounted, as the real relay's paths would show."""

    def __init__(self) -> None:
        self.mounted: set[str] = set()

    def publish(self, sensor_id: str, source: Source) -> None:
        self.mounted.add(sensor_id)

    def unpublish(self, sensor_id: str) -> None:
        self.mounted.discard(sensor_id)


@dataclass
class InprocVst:
    inventory: Inventory
    relay: NoRelay
    server: ApiServer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}{api.API_PREFIX}"

    def sensor_ids(self) -> set[str]:
        return {s.sensor_id for s in self.inventory.sensors()}


@contextmanager
def inproc_vst() -> Iterator[InprocVst]:
    knobs = load_knobs({"VST_EMU_HOST": "127.0.0.1"})
    relay = NoRelay()
    inventory = Inventory(relay, 0.0, lambda sid: f"rtsp://127.0.0.1:1/live/{sid}")
    server = ApiServer(("127.0.0.1", 0), api.Context(inventory, knobs, 1))
    with served(server, "inproc-vst"):
        yield InprocVst(inventory, relay, server)
