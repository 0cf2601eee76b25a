"""Environment knobs of the VST emulator, read once at start-up.

Why a frozen object read once: tests steer the emulator through the environment of the process
they start; a malformed knob must stop the process before it listens (exit 2) rather than show up
as an odd answer later. Messages name the knob, never its value.

Knobs:
- ``VST_EMU_HOST`` (default ``127.0.0.1``): where both the HTTP API and the RTSP server listen, and
  the host written into the re-published ``rtsp://<host>:<rtsp port>/live/<sensorId>`` URLs.
- ``VST_EMU_HTTP_PORT`` (default 30888): the HTTP API (``/vst/api/v1`` and ``/emulator``).
- ``VST_EMU_RTSP_PORT`` (default 30554): the RTSP server that re-publishes each sensor.
- ``VST_EMU_URL_DELAY_S`` (float, default 0): seconds after ``sensor/add`` before the ``/live``
  URL shows in ``/sensor/{id}/streams`` (an empty list until then), as the real VST publishes it
  asynchronously.
- ``VST_EMU_VERSION`` (default ``1.3.0-emulated``): what ``/sensor/version`` reports.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 30888
DEFAULT_RTSP_PORT = 30554
DEFAULT_VERSION = "1.3.0-emulated"
MAX_PORT = 65535
PORT_RULE = f"an integer port 0..{MAX_PORT}"

T = TypeVar("T")


class KnobError(ValueError):
    """A knob holds a value of the wrong type or range; the message names the knob only."""


@dataclass(frozen=True)
class Knobs:
    """All start-up knobs, typed. Build with :func:`load_knobs`."""

    host: str
    http_port: int
    rtsp_port: int
    url_delay_s: float
    version: str


def _knob(
    env: Mapping[str, str],
    name: str,
    default: T,
    convert: Callable[[str], T],
    valid: Callable[[T], bool],
    requirement: str,
) -> T:
    """``env[name]`` converted and checked, ``default`` when unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    with contextlib.suppress(ValueError):  # unparsable and out of range share one message
        value = convert(raw)
        if valid(value):
            return value
    raise KnobError(f"{name} must be {requirement}")


def _is_port(value: int) -> bool:
    return 0 <= value <= MAX_PORT  # 0 lets the OS pick, useful for one-off runs


def _is_duration(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def load_knobs(env: Mapping[str, str] | None = None) -> Knobs:
    """Parse the knobs from ``env`` (the process environment by default)."""
    source = os.environ if env is None else env
    return Knobs(
        host=source.get("VST_EMU_HOST", "").strip() or DEFAULT_HOST,
        http_port=_knob(source, "VST_EMU_HTTP_PORT", DEFAULT_HTTP_PORT, int, _is_port, PORT_RULE),
        rtsp_port=_knob(source, "VST_EMU_RTSP_PORT", DEFAULT_RTSP_PORT, int, _is_port, PORT_RULE),
        url_delay_s=_knob(
            source, "VST_EMU_URL_DELAY_S", 0.0, float, _is_duration, "seconds, finite and >= 0"
        ),
        version=source.get("VST_EMU_VERSION", "").strip() or DEFAULT_VERSION,
    )
