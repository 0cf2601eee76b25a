"""Live streams end to end (issue 4): published sources → VST (emulated) → RTVI (emulated).

Everything here is real except the two services' stand-ins: publisher containers run GStreamer's
RTSP server, VST re-publishes over real RTSP, the RTVI emulator decodes with ffmpeg and captions
from what it decodes, and the reconciler proves freshness by decoding frames itself.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from state.keys import Key
from state.store import Store
from tests.conftest import Cli, containers_of
from tests.e2e.daemon_helpers import (
    DaemonProcess,
    events_of,
    is_ready,
    status_of,
    wait_for,
)
from tests.e2e.stream_helpers import (
    PALETTE8,
    PALETTE_ALL,
    Rtvi,
    colours,
    condition,
    rtvi_deployment,
    sources,
    status,
    streamset,
    vst_process,
)
from tests.ports import free_port
from tests.specs_factory import write

LABEL_INSTANCE = "rtvi.reconciler/instance"
LABEL_SOURCE = "rtvi.reconciler/source"
APPLY_TIMEOUT = 300
CAPTIONS = {"prompt": "Which colour fills the frame?", "chunkDuration": 2,
            "maxCaptionAgeSeconds": 30}


def _publishers(client: docker.DockerClient, instance: str) -> dict[str, Any]:
    found = containers_of(client, instance)
    return {c.labels[LABEL_SOURCE]: c for c in found if LABEL_SOURCE in c.labels}


def _apply(cli: Cli, specs: Path) -> str:
    done = cli("apply", str(specs), timeout=APPLY_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _named_colours(text: str) -> set[str]:
    return {c for c in PALETTE_ALL if re.search(rf"\b{c}\b", text)}


def test_eight_colours_through_vst_then_three_removed_then_deleted(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    rtvi = Rtvi(port)
    with vst_process(tmp_path) as vst:
        write(specs, rtvi_deployment(emulator_image, port),
              streamset(colours(PALETTE8), vst_url=vst.url, captions=CAPTIONS))
        _apply(cli, specs)

        # Every stream is registered with VST's /live/ URL, never the camera's.
        listed = rtvi.streams()
        assert len(listed) == 8
        assert all(f":{vst.rtsp_port}/live/" in s["liveStreamUrl"] for s in listed), listed
        assert len(vst.sensors()) == 8
        assert set(_publishers(docker_client, instance)) == {c.lower() for c in PALETTE8}

        # Each source's captions name its own colour, and no other.
        data = status(cli, "StreamSet/cams")
        assert condition(data, "Ready")["status"] == "True"
        per_source = sources(data)
        for colour in PALETTE8:
            fact = per_source[colour.lower()]
            assert fact["framesFresh"] is True, fact
            assert fact["frame"] == f"solid {colour}", fact
            assert _named_colours(fact["lastCaption"]) == {colour}, fact

        # The human view: one row per source with registration, freshness and caption age.
        shown = cli("status", "StreamSet/cams")
        assert shown.returncode == 0, shown.stdout
        assert "LAST CAPTION" in shown.stdout, shown.stdout
        rows = [line for line in shown.stdout.splitlines() if " fresh (" in line]
        assert len(rows) == 8, shown.stdout
        assert all(" yes " in row for row in rows), shown.stdout

        # Remove three: exactly those go, in one batch call; the other five stay registered.
        before = {s["id"]: s for s in rtvi.state()["streams"]}
        adds, batches = rtvi.calls("POST /v1/streams/add"), rtvi.calls(
            "DELETE /v1/streams/delete-batch")
        keep = PALETTE8[:5]
        write(specs, rtvi_deployment(emulator_image, port),
              streamset(colours(keep), vst_url=vst.url, captions=CAPTIONS))
        plan = cli("plan", str(specs))
        assert plan.returncode == 2, plan.stdout + plan.stderr
        assert plan.stdout.count("remove source") == 3
        assert "register" not in plan.stdout
        _apply(cli, specs)
        after = {s["id"]: s for s in rtvi.state()["streams"]}
        assert len(after) == 5
        assert all(after[i]["added_at"] == before[i]["added_at"] for i in after)
        assert rtvi.calls("DELETE /v1/streams/delete-batch") == batches + 1
        assert rtvi.calls("POST /v1/streams/add") == adds
        assert len(vst.sensors()) == 5
        assert set(_publishers(docker_client, instance)) == {c.lower() for c in keep}

        # Delete: no stream, no sensor, no publisher is left.
        done = cli("delete", "StreamSet/cams")
        assert done.returncode == 0, done.stdout + done.stderr
        assert rtvi.streams() == []
        assert rtvi.state()["caption_requests"] == []
        assert vst.sensors() == []
        assert _publishers(docker_client, instance) == {}


def test_rtvi_restart_reregisters_and_a_dropped_vst_stream_degrades_by_name(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    rtvi = Rtvi(port)
    with vst_process(tmp_path) as vst:
        write(specs, rtvi_deployment(emulator_image, port),
              streamset(colours(["RED", "GREEN", "BLUE"]), vst_url=vst.url))
        _apply(cli, specs)
        ids = {s["id"] for s in rtvi.streams()}
        assert len(ids) == 3

        # The service restarts and forgets its streams: the next pass re-registers them.
        [service] = [c for c in docker_client.containers.list(
            filters={"label": f"{LABEL_INSTANCE}={instance}"}) if LABEL_SOURCE not in c.labels]
        service.restart(timeout=2)
        wait_for("the restarted service", lambda: _ready_empty(rtvi), 30)
        plan = cli("plan", str(specs))
        assert plan.returncode == 2, plan.stdout
        assert "no longer registered with RTVI" in plan.stdout, plan.stdout
        _apply(cli, specs)
        assert {s["id"] for s in rtvi.streams()} == ids  # deterministic IDs, same streams

        # A publisher removed by hand comes back on its old port: nothing is re-registered.
        sensors = {s["sensorId"] for s in vst.sensors()}
        adds = rtvi.calls("POST /v1/streams/add")
        _publishers(docker_client, instance)["red"].remove(force=True)
        plan = cli("plan", str(specs))
        assert "publish source red" in plan.stdout, plan.stdout
        assert "because no publisher container" in plan.stdout, plan.stdout
        assert "register" not in plan.stdout, plan.stdout
        _apply(cli, specs)
        assert {s["sensorId"] for s in vst.sensors()} == sensors
        assert rtvi.calls("POST /v1/streams/add") == adds
        assert _publishers(docker_client, instance)["red"].status == "running"

        # kill -9 between "VST created the sensor" and "we recorded its ID": the next pass
        # adopts the sensor by its deterministic name instead of registering a second one.
        store = Store(cli.state_dir)
        store.update(Key("StreamSet", "cams"), lambda st: st.upsert_inventory(
            st.inventory_item("sensor", "blue").model_copy(update={"id": None,  # type: ignore
                                                                    "state": "pending"})))
        _apply(cli, specs)
        assert {s["sensorId"] for s in vst.sensors()} == sensors

        # VST stops serving one stream: that source, by name, is Degraded; restored → Ready.
        green = sources(status(cli, "StreamSet/cams"))["green"]["sensorId"]
        vst.drop(green)
        done = cli("apply", str(specs), timeout=APPLY_TIMEOUT)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "green: no fresh frames" in done.stdout
        data = status(cli, "StreamSet/cams")
        degraded = condition(data, "Degraded")
        assert degraded["status"] == "True"
        assert "green" in degraded["message"]
        assert "red" not in degraded["message"]
        assert "blue" not in degraded["message"]
        assert condition(data, "Ready")["status"] == "False"
        vst.drop(green, restore=True)
        _apply(cli, specs)
        assert condition(status(cli, "StreamSet/cams"), "Ready")["status"] == "True"


def _ready_empty(rtvi: Rtvi) -> bool:
    try:
        return rtvi.streams() == []
    except Exception:
        return False


def test_media_file_with_wrong_sha256_is_refused_and_nothing_published(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    media = tmp_path / "clip.mp4"
    media.write_bytes(b"not the pinned clip")
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, port),
          streamset([{"name": "clip", "file": {"path": str(media), "sha256": "0" * 64}}]))
    done = cli("apply", str(specs), timeout=APPLY_TIMEOUT)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"sha256 mismatch for {media}" in done.stdout + done.stderr
    assert _publishers(docker_client, instance) == {}
    assert Rtvi(port).streams() == []
    data = status(cli, "StreamSet/cams")
    assert condition(data, "Stalled")["status"] == "True"


# 16 streams, not 64: one batch against 16 single deletes (48 s of drain windows) proves the
# same, without 48 more publishers and decoders loading a CI runner's two cores.
@pytest.mark.parametrize(("count", "drain"), [(16, 3)])
def test_teardown_of_many_streams_is_one_batch_within_one_drain_window(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path, count: int, drain: int) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    rtvi = Rtvi(port)
    names = [f"s{i:02d}" for i in range(count)]
    palette = PALETTE8
    sources_spec = [{"name": n, "synthetic": {"colour": palette[i % len(palette)]}}
                    for i, n in enumerate(names)]
    # Each stream takes 60 s to drain on its own; the teardown allows `drain` seconds.
    write(specs, rtvi_deployment(emulator_image, port, RTVI_EMU_DRAIN_S="60"),
          streamset(sources_spec, publisher={"width": 64, "height": 48, "fps": 2},
                    teardown={"drainTimeoutSeconds": drain, "deadlineSeconds": 120}))
    _apply(cli, specs)
    assert len(rtvi.streams()) == count
    batches = rtvi.calls("DELETE /v1/streams/delete-batch")
    started = time.monotonic()
    done = cli("delete", "StreamSet/cams")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert rtvi.streams() == []
    assert rtvi.calls("DELETE /v1/streams/delete-batch") == batches + 1  # one batch for all
    assert _publishers(docker_client, instance) == {}
    # About one drain window of `drain` s: not `count` of them (single deletes), and not the
    # service's own 60 s (the drain timeout was ignored). The rest is removing the publishers.
    assert elapsed < 40, elapsed


def test_at_capacity_backs_off_reports_it_and_completes_when_capacity_frees(
        cli: Cli, instance: str, emulator_image: str, tmp_path: Path) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    rtvi = Rtvi(port)
    write(specs, rtvi_deployment(emulator_image, port, RTVI_EMU_MAX_STREAMS="2"),
          streamset(colours(["RED", "GREEN", "BLUE", "YELLOW"])))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()

        def backoffs() -> list[float] | None:
            delays = [float(e.message.split()[2].rstrip("s"))
                      for e in events_of(cli, "StreamSet/cams") if e.reason == "Backoff"]
            return delays if len(delays) >= 3 else None
        delays = wait_for("three retries at capacity", backoffs, 60)
        assert delays == sorted(delays), delays
        assert delays[-1] > delays[0], delays
        ready = (status_of(cli, "StreamSet/cams") or {}).get("conditions", [])
        assert any(c["type"] == "Ready" and c["reason"] == "AtCapacity" for c in ready), ready
        # No request storm: about one add per pass, not a tight loop.
        assert rtvi.calls("POST /v1/streams/add") <= len(delays) + 2
        assert len(rtvi.streams()) == 2
        rtvi.knobs(max_streams=8)
        wait_for("Ready once capacity frees", lambda: is_ready(cli, "StreamSet/cams"),
                 delays[-1] * 2 + 150)  # past a readiness timeout (90 s)
        assert len(rtvi.streams()) == 4
    finally:
        assert daemon.terminate() == 0


def test_teardown_keeps_publishers_while_rtvi_cannot_confirm_and_deletes_in_order(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, port), streamset(colours(["RED", "GREEN"])))
    _apply(cli, specs)
    [service] = [c for c in containers_of(docker_client, instance)
                 if LABEL_SOURCE not in c.labels]
    service.stop(timeout=2)
    done = cli("delete", "StreamSet/cams")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not deleted" in done.stdout, done.stdout
    assert "kept: its RTVI stream is still registered" in done.stdout, done.stdout
    assert set(_publishers(docker_client, instance)) == {"red", "green"}  # contract order
    service.start()
    # The whole spec set: the StreamSet goes first, while its service still answers.
    wait_for("the service to answer", lambda: _answers(Rtvi(port)), 30)
    done = cli("delete", str(specs))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.index("StreamSet/cams") < done.stdout.index("Deployment/vlm")
    assert containers_of(docker_client, instance) == []


def _answers(rtvi: Rtvi) -> bool:
    try:
        rtvi.streams()
    except Exception:
        return False
    return True


def test_a_lost_status_record_adopts_the_running_publishers(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    """Issue 26: a StreamSet whose status file was lost re-created both publishers on new
    ports and re-registered its streams. What runs is adopted: the same containers, the same
    URLs, no new registration."""
    port = free_port()
    specs = tmp_path / "specs"
    rtvi = Rtvi(port)
    write(specs, rtvi_deployment(emulator_image, port), streamset(colours(["RED", "BLUE"])))
    _apply(cli, specs)
    before = {name: c.id for name, c in _publishers(docker_client, instance).items()}
    streams = {s["id"]: s for s in rtvi.state()["streams"]}
    adds = rtvi.calls("POST /v1/streams/add")
    record = cli.state_dir / "resources" / "StreamSet" / "cams.json"
    assert record.is_file()
    record.unlink()

    text = _apply(cli, specs)
    assert "adopted its running publisher" in text
    assert {name: c.id for name, c in _publishers(docker_client, instance).items()} == before
    assert rtvi.calls("POST /v1/streams/add") == adds
    after = {s["id"]: s for s in rtvi.state()["streams"]}
    assert {i: s["added_at"] for i, s in after.items()} == {
        i: s["added_at"] for i, s in streams.items()}
    assert condition(status(cli, "StreamSet/cams"), "Ready")["status"] == "True"
