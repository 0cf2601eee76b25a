"""A pass that can be stopped, and a readiness wait that does not hold a worker.

Readiness is a phase the daemon re-checks (requeue-after), not a wait inside one pass: a model
that takes a minute to load must neither starve other resources nor keep SIGTERM waiting.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import docker
import httpx
import tenacity

from tests.conftest import Cli
from tests.e2e.daemon_helpers import (
    DaemonProcess,
    condition,
    events_of,
    is_ready,
    owned,
    status_of,
    wait_for,
)
from tests.e2e.stream_helpers import Rtvi, colours, rtvi_deployment, streamset, vst_process
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

RESYNC_NEVER = "3600"
SLOW = {"RTVI_EMU_STARTUP_DELAY_S": 600}  # never ready within the tests' budgets


def _progressing(cli: Cli, resource: str) -> bool:
    cond = condition(status_of(cli, resource), "Progressing")
    return cond is not None and cond["status"] == "True" and (
        cond["reason"] == "WaitingForReadiness")


def _progress_message(cli: Cli) -> str:
    cond = condition(status_of(cli, "Deployment/slow"), "Progressing")
    return str(cond["message"]) if cond else ""


def _daemon(cli: Cli, tmp_path: Path, specs: Path, *args: str) -> DaemonProcess:
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC_NEVER, *args],
                           tmp_path / f"daemon-{time.monotonic_ns()}.log")
    daemon.wait_healthy()
    return daemon


def test_a_slow_deployment_does_not_delay_another(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("slow", pinned(emulator_image), free_port(), env=SLOW,
                            readiness={"timeoutSeconds": 60, "pollSeconds": 0.5}))
    daemon = _daemon(cli, tmp_path, specs, "--workers", "1")  # one worker for Deployments
    try:
        wait_for("the slow one to be loading", lambda: _progressing(cli, "Deployment/slow"), 30)
        write(specs, deployment("quick", pinned(emulator_image), free_port()), name="quick.yaml",
              host=False)
        wait_for("the quick one Ready while the slow one loads",
                 lambda: is_ready(cli, "Deployment/quick"), 30)  # not after the slow one's 60 s
        assert not is_ready(cli, "Deployment/slow")
        assert _progressing(cli, "Deployment/slow")
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_sigterm_during_a_readiness_wait_ends_the_daemon_within_10_s(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("slow", pinned(emulator_image), free_port(), env=SLOW,
                            readiness={"timeoutSeconds": 120, "pollSeconds": 0.5}))
    daemon = _daemon(cli, tmp_path, specs)
    wait_for("the readiness wait", lambda: _progressing(cli, "Deployment/slow"), 30)
    [container] = owned(docker_client, instance)
    message = _progress_message(cli)
    signalled = time.monotonic()
    assert daemon.terminate() == 0, daemon.log()
    assert time.monotonic() - signalled < 10

    # A restart adopts the container it left loading: no duplicate, no recreate.
    again = _daemon(cli, tmp_path, specs)
    try:
        wait_for("the readiness wait to resume", lambda: _progressing(cli, "Deployment/slow")
                 and _progress_message(cli) != message, 30)  # a pass ran: it counts on
        assert [c.id for c in owned(docker_client, instance)] == [container.id]
    finally:
        assert again.terminate() == 0, again.log()


def _metric(port: int, name: str, **labels: str) -> float:
    """One sample from the daemon's /metrics (0 if absent)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _calls_by_kind(cli: Cli) -> dict[str, int]:
    """The daemon's Docker calls so far on Host local, per kind of call (its health)."""
    said = json.loads(cli("health").stdout)
    calls: dict[str, int] = said["dockerCallsByHost"]["local"]
    return calls


def _idle(port: int) -> bool:
    """Nothing queued and no pass running (a Ready record may be one write from its last)."""
    return (_metric(port, "rtvi_reconciler_queue_depth") == 0
            and _metric(port, "rtvi_reconciler_queue_processing") == 0)


def _healthy(client: docker.DockerClient, instance: str, count: int) -> bool:
    """Docker calls every container healthy: its health_status event, which wakes a pass, is
    behind us (a late one woke a pass that straddled the snapshot below: 3 calls, not 2)."""
    found = owned(client, instance)
    return len(found) == count and all(
        c.attrs["State"].get("Health", {}).get("Status") == "healthy" for c in found)


def _settled(port: int, seen: list[float]) -> bool:
    """Idle, and no pass has run since the previous look (a woken pass has had its turn)."""
    total = sum(_metric(port, "rtvi_reconciler_reconcile_duration_seconds_count", kind=k)
                for k in ("Host", "Deployment"))
    settled = _idle(port) and seen[-1:] == [total]
    seen.append(total)
    return settled


class _Disturbed(Exception):
    """A container of another test was removed or renamed on the engine during the pass."""


def _no_op_pass(cli: Cli, port: int, client: docker.DockerClient
                ) -> tuple[list[str], float, dict[str, int]]:
    """One settled daemon's pass over everything (``sync``): the state files it changed, the
    Docker calls it made, and those calls by kind. Raises _Disturbed when it made more than 2
    while another container on the engine was removed or renamed."""
    passes = "rtvi_reconciler_reconcile_duration_seconds_count"
    seen: list[float] = []
    wait_for("the queue to drain and settle", partial(_settled, port, seen), 20, interval=0.3)
    files = [p for p in cli.state_dir.rglob("*") if p.is_file() and p.suffix != ".log"]
    before = {p: p.stat().st_mtime_ns for p in files}
    done = _metric(port, passes, kind="Deployment")
    hosts = _metric(port, passes, kind="Host")
    calls = _metric(port, "rtvi_reconciler_api_calls_total", target="docker:local")
    assert calls > 0  # the counter is there: converging took calls
    by_kind = _calls_by_kind(cli)
    since = int(time.time())
    assert cli("sync").returncode == 0  # re-check every resource now
    wait_for("a pass over each Deployment",
             lambda: _metric(port, passes, kind="Deployment") >= done + 3, 30)
    wait_for("the Host pass too", lambda: _metric(port, passes, kind="Host") > hosts, 30)
    wait_for("the passes to end", lambda: _idle(port), 10)
    changed = [str(p) for p in files if p.stat().st_mtime_ns != before[p]]
    made = _metric(port, "rtvi_reconciler_api_calls_total", target="docker:local") - calls
    which = {k: n - by_kind.get(k, 0) for k, n in _calls_by_kind(cli).items()
             if n != by_kind.get(k, 0)}
    if made > 2 and list(client.api.events(
            since=since, until=int(time.time()) + 1, decode=True,
            filters={"type": ["container"], "event": ["destroy", "rename"]})):
        raise _Disturbed(f"{made} calls: {which}")
    return changed, made, which


def test_a_no_op_pass_writes_no_state_file_and_makes_at_most_2_api_calls_per_host(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, *(deployment(n, pinned(emulator_image), free_port()) for n in ("a", "b", "c")))
    port = free_port()
    daemon = _daemon(cli, tmp_path, specs, "--metrics-address", f"127.0.0.1:{port}")
    try:
        for name in ("a", "b", "c"):
            wait_for(f"{name} Ready", partial(is_ready, cli, f"Deployment/{name}"), 60)
        wait_for("every container healthy", partial(_healthy, docker_client, instance, 3), 60)
        # Another worker's container removed or renamed on this shared engine mid-pass drops
        # the Host's view, as it must (port holders, freed names): that pass looked twice,
        # and is measured again. A quiet pass must make at most 2 calls.
        for attempt in tenacity.Retrying(retry=tenacity.retry_if_exception_type(_Disturbed),
                                         stop=tenacity.stop_after_attempt(5), reraise=True):
            with attempt:
                changed, made, which = _no_op_pass(cli, port, docker_client)
        assert changed == [], changed
        assert made <= 2, f"{made} Docker API calls for a no-op pass over one Host: {which}"
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_a_stream_set_is_planned_once_per_pass_from_the_shared_host_view(
        cli: Cli, instance: str, emulator_image: str, tmp_path: Path) -> None:
    """A no-op pass over a Deployment with a StreamSet of two published sources: the
    StreamSet asks RTVI for its streams once, to plan (registration reuses that list; no
    re-plan), its publishers come from the Host's shared view (no Docker call of its own), it
    trusts the frame watch's proof instead of decoding every source again, and so it writes
    no state file."""
    port, metrics = free_port(), free_port()
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, port), streamset(
        colours(["RED", "GREEN"]), readiness={"timeoutSeconds": 90, "maxFrameAgeSeconds": 600}))
    daemon = _daemon(cli, tmp_path, specs, "--metrics-address", f"127.0.0.1:{metrics}")
    passes = "rtvi_reconciler_reconcile_duration_seconds_count"
    calls = "rtvi_reconciler_api_calls_total"
    try:
        wait_for("the StreamSet Ready", lambda: is_ready(cli, "StreamSet/cams"), 120)
        wait_for("the queue to drain and no pass in flight", lambda: _idle(metrics), 10)
        done = _metric(metrics, passes, kind="StreamSet")
        docker_before = _metric(metrics, calls, target="docker:local")
        lists_before = _metric(metrics, calls, target="http:list streams")
        assert lists_before > 0  # the counter is there: converging listed the streams
        files = [p for p in cli.state_dir.rglob("*") if p.is_file() and p.suffix != ".log"]
        before = {p: p.stat().st_mtime_ns for p in files}
        assert cli("sync").returncode == 0
        wait_for("a pass over the StreamSet",
                 lambda: _metric(metrics, passes, kind="StreamSet") > done, 60)
        wait_for("the queue to drain and no pass in flight", lambda: _idle(metrics), 10)
        lists = _metric(metrics, calls, target="http:list streams") - lists_before
        assert lists == 1, f"{lists} stream lists for one no-op StreamSet pass"
        made = _metric(metrics, calls, target="docker:local") - docker_before
        assert made <= 2, f"{made} Docker API calls for a no-op pass (Host, Deployment, " \
                          "StreamSet)"
        changed = [str(p) for p in files if p.stat().st_mtime_ns != before[p]]
        assert changed == [], changed
    finally:
        assert daemon.terminate() == 0, daemon.log()


def test_sigterm_during_a_stream_registration_ends_the_daemon_within_10_s(
        cli: Cli, instance: str, emulator_image: str, tmp_path: Path) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    # VST publishes each sensor's /live/ URL only after 12 s: the pass waits for it.
    with vst_process(tmp_path, VST_EMU_URL_DELAY_S="12") as vst:
        write(specs, rtvi_deployment(emulator_image, port),
              streamset(colours(["RED", "GREEN"]), vst_url=vst.url))
        daemon = _daemon(cli, tmp_path, specs)
        wait_for("sensors added, URLs awaited", lambda: len(vst.sensors()) == 2, 60)
        signalled = time.monotonic()
        assert daemon.terminate() == 0, daemon.log()
        assert time.monotonic() - signalled < 10

        again = _daemon(cli, tmp_path, specs)  # adopts the sensors by their names
        try:
            wait_for("the StreamSet Ready", lambda: is_ready(cli, "StreamSet/cams"), 120)
            assert len(vst.sensors()) == 2
            assert len(Rtvi(port).streams()) == 2
        finally:
            assert again.terminate() == 0, again.log()


def test_a_health_blip_on_a_service_older_than_its_readiness_budget_is_proven_again(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """The daemon counts a loading service's readiness budget from its container's start. A
    long-proven service whose one steady-state check failed (a slow answer under load) was
    held to that budget too, long spent: it had no time to answer again, and one blip made it
    ReadinessTimedOut. Its second proof gets a slice of its own."""
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), port,
                            readiness={"timeoutSeconds": 2, "pollSeconds": 0.2}))
    metrics = free_port()
    daemon = _daemon(cli, tmp_path, specs, "--metrics-address", f"127.0.0.1:{metrics}")
    try:
        wait_for("vlm Ready", lambda: is_ready(cli, "Deployment/vlm"), 60)
        [container] = owned(docker_client, instance)
        started = datetime.fromisoformat(container.attrs["State"]["StartedAt"][:19]).replace(
            tzinfo=UTC).timestamp()
        wait_for("the container to outlive its 2 s readiness budget",
                 lambda: time.time() - started > 4, 30)
        seen = len(events_of(cli, "Deployment/vlm"))
        fault = {"path_prefix": "/v1/health/ready", "status": 503, "count": 2}
        answer = httpx.post(f"http://127.0.0.1:{port}/emulator/faults", json=fault, timeout=5)
        assert answer.status_code == 200, answer.text
        rtvi, route = Rtvi(port), "GET /v1/health/ready"
        asked = rtvi.calls(route)
        assert cli("sync").returncode == 0
        wait_for("the blip met, then a 200", lambda: rtvi.calls(route) >= asked + 3, 30)
        wait_for("the pass to end", lambda: _idle(metrics), 10)
        said = [f"{e.reason}: {e.message}" for e in events_of(cli, "Deployment/vlm")[seen:]]
        assert said == [], said
        assert is_ready(cli, "Deployment/vlm")
    finally:
        assert daemon.terminate() == 0, daemon.log()

