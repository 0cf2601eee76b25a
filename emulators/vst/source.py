"""Where a sensor's frames come from. Kept apart from ``relay`` (GStreamer) so the inventory and
the HTTP API can be used without GStreamer: the tests serve them in-process with a relay that
mounts nothing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """Where a sensor's frames come from; ``password`` is never logged nor returned by the API."""

    url: str
    username: str | None = None
    password: str | None = None
