"""The sensor inventory and the injected faults, behind one lock.

Why the relay is driven from here, under the same lock: add, delete, drop and restore each change
the inventory and the RTSP mounts together; holding one lock across both means a delete racing a
restore can never leave a mount for a sensor the API no longer lists. Relay calls are short (they
run on the GLib thread and never call back here), so holding the lock is cheap.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from emulators.vst.source import Source

STATE_ONLINE = "online"
STATE_OFFLINE = "offline"
STREAM_CODEC = "H264"  # the relay passes H.264 through; nothing else is relayed


class Publisher(Protocol):
    """What the inventory needs of the relay (a fake one keeps unit use free of GStreamer)."""

    def publish(self, sensor_id: str, source: Source) -> None: ...

    def unpublish(self, sensor_id: str) -> None: ...


class UnknownSensor(KeyError):
    """No sensor with that ID (never added, or deleted)."""


class InjectedFailure(Exception):
    """A fault set through the admin API fired: answer ``status`` instead of doing the work."""

    def __init__(self, status: int) -> None:
        super().__init__(f"injected failure {status}")
        self.status = status


@dataclass
class Sensor:
    """One added sensor; ``source.password`` stays here and is never returned or logged."""

    sensor_id: str
    name: str
    source: Source
    location: str | None
    tags: object
    added_at: float
    dropped: bool = False

    @property
    def public_url(self) -> str:
        return redact_url(self.source.url)


@dataclass
class _AddFault:
    remaining: int = 0
    status: int = 500


@dataclass
class Inventory:
    """Sensors by ID plus the pending ``sensor/add`` faults; every method takes the lock."""

    publisher: Publisher
    url_delay_s: float
    live_url: Callable[[str], str]
    clock: Callable[[], float] = time.monotonic
    _sensors: dict[str, Sensor] = field(default_factory=dict)
    _add_fault: _AddFault = field(default_factory=_AddFault)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(
        self, name: str, source: Source, location: str | None = None, tags: object = None
    ) -> Sensor:
        """Register and mount a sensor, unless an injected fault fires first."""
        with self._lock:
            if self._add_fault.remaining > 0:
                self._add_fault.remaining -= 1
                raise InjectedFailure(self._add_fault.status)
            sensor = Sensor(str(uuid.uuid4()), name, source, location, tags, self.clock())
            self.publisher.publish(sensor.sensor_id, source)
            self._sensors[sensor.sensor_id] = sensor
            return sensor

    def delete(self, sensor_id: str) -> Sensor:
        with self._lock:
            sensor = self._get(sensor_id)
            if not sensor.dropped:
                self.publisher.unpublish(sensor_id)
            del self._sensors[sensor_id]
            return sensor

    def set_dropped(self, sensor_id: str, dropped: bool) -> Sensor:
        """Stop (``True``) or resume (``False``) serving a sensor's ``/live`` path; idempotent."""
        with self._lock:
            sensor = self._get(sensor_id)
            if dropped and not sensor.dropped:
                self.publisher.unpublish(sensor_id)
            elif not dropped and sensor.dropped:
                self.publisher.publish(sensor_id, sensor.source)
            sensor.dropped = dropped
            return sensor

    def fail_adds(self, count: int, status: int) -> None:
        with self._lock:
            self._add_fault = _AddFault(count, status)

    def sensors(self) -> list[Sensor]:
        with self._lock:
            return list(self._sensors.values())

    def sensor(self, sensor_id: str) -> Sensor:
        with self._lock:
            return self._get(sensor_id)

    def streams(self, sensor: Sensor) -> list[dict[str, object]]:
        """The sensor's streams as the API shows them: none until the URL delay has passed.

        Choices where the real VST is unknown: the main stream's ID is the sensor ID; framerate
        and resolution are not probed from the source and are reported as empty strings; a
        dropped sensor still lists its URL (the real VST keeps advertising a stream that stopped
        flowing, which is why consumers must watch frames, not the API).
        """
        if self.clock() - sensor.added_at < self.url_delay_s:
            return []
        return [
            {
                "streamId": sensor.sensor_id,
                "isMain": True,
                "url": self.live_url(sensor.sensor_id),
                "name": sensor.name,
                "metadata": {"codec": STREAM_CODEC, "framerate": "", "resolution": ""},
            }
        ]

    def snapshot(self) -> dict[str, object]:
        """Everything an emulator test may want to check, without secrets."""
        with self._lock:
            sensors = list(self._sensors.values())
            fault = {"remaining": self._add_fault.remaining, "status": self._add_fault.status}
        return {
            "sensors": [
                {
                    "sensorId": s.sensor_id,
                    "name": s.name,
                    "sensorUrl": s.public_url,
                    "dropped": s.dropped,
                    "urlPublished": bool(self.streams(s)),
                }
                for s in sensors
            ],
            "faults": {"add": fault},
        }

    def _get(self, sensor_id: str) -> Sensor:
        try:
            return self._sensors[sensor_id]
        except KeyError:
            raise UnknownSensor(sensor_id) from None


def redact_url(url: str) -> str:
    """``url`` without a password in its user info (``rtsp://user:***@host/...``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
