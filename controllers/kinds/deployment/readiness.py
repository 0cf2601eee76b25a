"""Wait until an RT-VLM container is ready (rule 11), failing fast when it never will be.

Ready = container running (and healthy, where it has a healthcheck) AND ``/v1/health/ready``
answers 200 AND ``/v1/models`` lists a model. Logs are followed while we wait: a fatal marker
(``EngineDeadError``, ``CUDA out of memory``, ``FMHA kernels are not found``) or an exit ends
the wait at once, because a real model load can take half an hour and nobody should wait that
long for a container that already told us it is dead.
"""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from controllers.clients import httpclients
from controllers.clients.docker_client import ContainerInfo, DockerEngine, LogFollower
from controllers.errors import ContainerPaused, ReadinessFailed, ReadinessTimedOut
from controllers.kinds.deployment.runtime_facts import fatal_marker, update_facts
from controllers.waiting import until
from state.models import ResourceStatus

PROGRESS_EVERY_S = 5.0
HTTP_TIMEOUT_S = 3.0
LOG_TAIL_LINES = 20
STARTED_AT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$")

Progress = Callable[[str], None]


@dataclass
class ReadinessResult:
    model_id: str
    waited_s: float
    runtime: dict[str, str] = field(default_factory=dict)
    # What the pass learnt, for the record (the engine writes it with the Ready verdict);
    # None: the record already says it (a service proven ready at this spec, still serving).
    facts: Callable[[ResourceStatus], None] | None = None
    # A recreate: seconds from the old container's stop to the new one's readiness, the gap
    # in service a replacement costs (None: nothing was replaced in this pass).
    gap_s: float | None = None


@dataclass
class _Probe:
    ok: bool
    detail: str
    model_id: str = ""


@dataclass
class _Reported:
    """The last progress line: what it said and when (monotonic)."""

    detail: str = ""
    at: float = 0.0


def paused_message(name: str, pending: list[str]) -> str:
    """Someone paused the container (``docker pause``; a debugging session, a hung service
    frozen on purpose): we neither unpause nor replace it behind their back, we say so."""
    message = (f"container {name} is paused; resume it with `docker unpause {name}` "
               "(the reconciler does not unpause or replace a container someone paused)")
    if pending:
        message += f"; once resumed it will be recreated: {'; '.join(pending)}"
    return message


def wait_ready(engine: DockerEngine, container_id: str, url: str, timeout_s: float,
               poll_s: float, progress: Progress,
               stop: threading.Event | None = None, token: str | None = None) -> ReadinessResult:
    """Block until ready or raise ReadinessFailed with a reason naming what went wrong, or
    Stopped as soon as ``stop`` is set."""
    started = time.monotonic()
    lines: queue.Queue[str] = queue.Queue()
    stream = engine.follow_logs(container_id)
    follower = threading.Thread(target=_pump, args=(stream, lines), daemon=True,
                                name=f"logs-{container_id[:12]}")
    follower.start()
    try:
        return _wait(engine, container_id, url, timeout_s, poll_s, progress, lines, started,
                     stop, token)
    finally:
        stream.close()


def _wait(engine: DockerEngine, container_id: str, url: str, timeout_s: float, poll_s: float,
          progress: Progress, lines: queue.Queue[str], started: float,
          stop: threading.Event | None, token: str | None) -> ReadinessResult:
    runtime: dict[str, str] = {}
    seen = _Reported()

    with httpclients.client(HTTP_TIMEOUT_S, token) as http:
        def check() -> ReadinessResult | None:
            _scan(lines, runtime)
            probe = _check_once(engine, container_id, url, http, runtime)
            if probe.ok:
                return ReadinessResult(probe.model_id, time.monotonic() - started, runtime)
            now = time.monotonic()
            if probe.detail != seen.detail or now - seen.at >= PROGRESS_EVERY_S:
                progress(f"waiting for readiness ({now - started:.0f}s/{timeout_s:g}s): "
                         f"{probe.detail}")
                seen.detail, seen.at = probe.detail, now
            return None
        result = until(check, timeout_s=timeout_s, pace=poll_s, stop=stop)
    if result is None:
        raise ReadinessTimedOut(timeout_s, seen.detail)
    return result


def still_serving(info: ContainerInfo, url: str, token: str | None = None) -> bool:
    """The steady-state check of a service that was proven ready at this spec: running, not
    paused, Docker's health fine (where it has a check) and one ``/v1/health/ready`` 200. No
    log following and no model listing: full readiness is proven again only after a change
    (or when this check fails)."""
    if not info.running or info.paused or info.health not in (None, "healthy"):
        return False
    try:
        with httpclients.client(HTTP_TIMEOUT_S, token) as http:
            return http.get(f"{url}/v1/health/ready").status_code == 200
    except httpx.HTTPError:
        return False


def exit_cause(code: int | None) -> str:
    """How a container ended, as a person reads it: a code above 128 is a signal (137: killed
    with SIGKILL, by a person, the OOM killer or ``docker kill``), not a crash of its own."""
    if code is not None and 128 < code < 128 + 65:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(code - 128).name} (exit code {code})"
    return f"exited with code {code}"


def started_epoch(info: ContainerInfo) -> float | None:
    """When the container last started (Unix seconds), from Docker's RFC 3339 ``StartedAt``
    (nanoseconds, which Python does not parse: cut to microseconds); None if never."""
    match = STARTED_AT.match(info.started_at)
    if match is None or match.group(1).startswith("0001-"):
        return None
    stamp = datetime.fromisoformat(match.group(1) + (match.group(2) or "")[:7] + "+00:00")
    return stamp.timestamp()


def _check_once(engine: DockerEngine, container_id: str, url: str, http: httpx.Client,
                runtime: dict[str, str]) -> _Probe:
    """One look: raises ReadinessFailed when it never will be ready, else the probe."""
    info = engine.container(container_id)
    if info is None:
        raise ReadinessFailed("ContainerGone", "the container disappeared while starting")
    if info.paused:
        raise ContainerPaused(paused_message(info.name, []))
    if not info.running:
        _scan_tail(engine, container_id, runtime)
        tail = engine.logs(container_id, tail=LOG_TAIL_LINES).strip()
        raise ReadinessFailed("ContainerExited", f"container {exit_cause(info.exit_code)} "
                              f"before becoming ready; last log lines:\n{tail}")
    if info.health == "unhealthy":
        raise ReadinessFailed("Unhealthy", "the container's healthcheck reports unhealthy")
    probe = _probe(http, url)
    if probe.ok and info.health not in (None, "healthy"):
        return _Probe(False, f"health {info.health}")
    return probe


def _pump(stream: LogFollower, sink: queue.Queue[str]) -> None:
    for line in stream:
        sink.put(line)


def _scan(lines: queue.Queue[str], runtime: dict[str, str]) -> None:
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return
        _check_line(line, runtime)


def _scan_tail(engine: DockerEngine, container_id: str, runtime: dict[str, str]) -> None:
    """After an exit, the marker may still be in flight on the follower: read the log tail."""
    for line in engine.logs(container_id, tail=LOG_TAIL_LINES * 10).splitlines():
        _check_line(line, runtime)


def _check_line(line: str, runtime: dict[str, str]) -> None:
    update_facts(runtime, line)
    marker = fatal_marker(line)
    if marker is not None:
        raise ReadinessFailed("FatalLogMarker", f"fatal log marker {marker!r} in container logs: "
                              f"{line.strip()[:300]}")


def _probe(http: httpx.Client, url: str) -> _Probe:
    try:
        ready = http.get(f"{url}/v1/health/ready")
        if ready.status_code != 200:
            return _Probe(False, f"/v1/health/ready answered {_status(ready)}")
        models = http.get(f"{url}/v1/models")
        if models.status_code != 200:
            return _Probe(False, f"/v1/models answered {_status(models)}")
        data = models.json().get("data") or []
        if not data or not isinstance(data[0], dict) or not data[0].get("id"):
            return _Probe(False, "/v1/models lists no model")
        return _Probe(True, "ready", str(data[0]["id"]))
    except httpx.HTTPError as exc:
        return _Probe(False, f"{url} not answering ({type(exc).__name__})")
    except ValueError:
        return _Probe(False, "/v1/models answered with invalid JSON")


def _status(response: httpx.Response) -> str:
    """The status code, with what a 401/403 means here."""
    code = response.status_code
    if code in (401, 403):
        sent = "Authorization" in response.request.headers
        return (f"{code}: the service refused our API token (spec.apiTokenSecret)" if sent
                else f"{code}: the service wants an API token; name its secret in "
                "spec.apiTokenSecret")
    return str(code)
