"""Shared pieces of the publisher and frame-probe tests: the engine, the image, polling."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from controllers.clients.docker_client import DockerEngine
from controllers.errors import ControllerError
from controllers.kinds.streamset.frames import FrameSample, probe
from state.keys import Key
from tests.emulators.helpers import wait_for

DOCKER_URL = "unix:///var/run/docker.sock"
RESOURCE = Key("StreamSet", "cams")
SPEC_HASH = "0123456789abcdef"
READY_S = 30.0
T = TypeVar("T")


def engine() -> DockerEngine:
    return DockerEngine(DOCKER_URL, "local")


def poll(what: str, attempt: Callable[[], T | None], timeout_s: float = READY_S) -> T:
    """Call ``attempt`` until it returns something; fail naming ``what`` after the deadline."""
    return wait_for(attempt, timeout=timeout_s, what=what)


def probe_until_served(url: str, timeout_s: float = READY_S) -> FrameSample:
    """A publisher answers RTSP a moment after its port is published: probe until a frame."""
    errors: list[str] = []

    def attempt() -> FrameSample | None:
        try:
            return probe(url, 5.0)
        except ControllerError as exc:
            errors.append(str(exc))
            return None

    try:
        return poll(f"a frame from {url}", attempt, timeout_s)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last error: {errors[-1:]}") from None
