"""Typed client for VST's sensor API (contracts/vst-api.md).

Why its own module: VST's answers need care of their own -- the field is ``sensorUrl`` (not
``url``), a sensor's re-published ``/live/`` URL appears asynchronously (empty list or 404 at
first; never fall back to the camera URL), and a failed list must never read as "no sensors".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from controllers.clients.http_api import ApiClient
from controllers.errors import PermanentError, TemporaryError
from state.redaction import redact_urls


class VstUnavailable(TemporaryError):
    """VST did not answer, or answered 5xx."""


class VstRejected(PermanentError):
    """VST refused the request (4xx)."""


@dataclass(frozen=True)
class Sensor:
    id: str
    name: str
    state: str


class VstClient(ApiClient):
    """One VST at ``base_url`` (``http://host:30888/vst/api/v1``)."""

    service = "VST"
    unavailable = VstUnavailable

    def _fail(self, what: str, response: httpx.Response) -> VstUnavailable | VstRejected:
        text = redact_urls(f"VST at {self.base_url}: {what} answered {response.status_code}: "
                      f"{response.text[:300]}")
        if response.status_code >= httpx.codes.INTERNAL_SERVER_ERROR:
            return VstUnavailable(text)
        return VstRejected(text)

    def add_sensor(self, url: str, name: str) -> str:
        """Register a camera; returns the sensor ID."""
        response = self._request("add sensor", "POST", "/sensor/add",
                                 json={"sensorUrl": url, "name": name})
        if response.status_code != httpx.codes.OK:
            raise self._fail("add sensor", response)
        sensor_id = _json(response, self.base_url).get("sensorId")
        if not sensor_id:
            raise VstUnavailable(f"VST at {self.base_url}: add sensor returned no sensorId")
        return str(sensor_id)

    def list_sensors(self) -> list[Sensor]:
        """Every sensor. Any failure raises: an error is never "no sensors"."""
        response = self._request("list sensors", "GET", "/sensor/list")
        if response.status_code != httpx.codes.OK:
            raise self._fail("list sensors", response)
        body = _json(response, self.base_url)
        if not isinstance(body, list):
            raise VstUnavailable(f"VST at {self.base_url}: sensor list is not a list")
        return [Sensor(str(s.get("sensorId", "")), str(s.get("name", "")),
                       str(s.get("state", ""))) for s in body if isinstance(s, dict)]

    def live_url(self, sensor_id: str) -> str | None:
        """VST's re-published main-stream URL, or None while it has not appeared yet."""
        response = self._request("sensor streams", "GET", f"/sensor/{sensor_id}/streams")
        if response.status_code == httpx.codes.NOT_FOUND:
            return None
        if response.status_code != httpx.codes.OK:
            raise self._fail("sensor streams", response)
        streams = _json(response, self.base_url)
        if not isinstance(streams, list):
            return None
        live = [s for s in streams if isinstance(s, dict) and "/live/" in str(s.get("url", ""))]
        main = [s for s in live if s.get("isMain")] or live
        return str(main[0]["url"]) if main else None

    def delete_sensor(self, sensor_id: str) -> bool:
        """Remove a sensor; False when VST no longer knows it (already gone)."""
        response = self._request("delete sensor", "DELETE", f"/sensor/{sensor_id}")
        if response.status_code == httpx.codes.NOT_FOUND:
            return False
        if response.status_code != httpx.codes.OK:
            raise self._fail("delete sensor", response)
        return True


def _json(response: httpx.Response, base_url: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise VstUnavailable(f"VST at {base_url} answered with a body that is not JSON") from exc
