"""The daemon re-proves frames beside the queue: a source that stops is seen without a pass.

The source is an external ``rtsp://`` URL (a real GStreamer RTSP server on loopback), so no
Docker event can tell the daemon it stopped: only the frame watch can. A periodic resync is
off (one hour), and no spec changes.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli
from tests.e2e.daemon_helpers import DaemonProcess, condition, status_of, wait_for
from tests.e2e.stream_helpers import rtvi_deployment, sources, streamset
from tests.emulators.rtsp_source import RtspSource
from tests.ports import free_port
from tests.specs_factory import write


def _last_frame(cli: Cli) -> str:
    data = status_of(cli, "StreamSet/cams")
    return str(sources(data)["red"].get("lastFrameAt", "")) if data else ""


READY_BOUND_S = 240.0
"""Two readiness timeouts (60 s) with their backoff and then some: a bound, not a timing (it
costs nothing when the StreamSet is Ready sooner, and a loaded CI runner is slow)."""


def _ready(cli: Cli) -> str:
    cond = condition(status_of(cli, "StreamSet/cams"), "Ready")
    return str(cond["status"]) if cond else ""


def test_a_source_that_stops_is_seen_by_the_watch_and_recovers(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    rtsp = RtspSource(free_port(), {"red": ("FF0000", None)}, tmp_path / "rtsp.log")
    rtsp.start()
    port = free_port()
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, port),
          streamset([{"name": "red", "url": rtsp.url("red")}],
                    readiness={"timeoutSeconds": 60, "maxFrameAgeSeconds": 1}))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", "3600"],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        wait_for("the StreamSet Ready", lambda: _ready(cli) == "True", READY_BOUND_S)
        first = _last_frame(cli)
        wait_for("a newer proof from the watch, no pass asked",
                 lambda: _last_frame(cli) not in ("", first), 30)

        rtsp.stop()
        wait_for("the stopped source seen: Ready False", lambda: _ready(cli) == "False", 60)
        data = status_of(cli, "StreamSet/cams")
        assert data is not None
        assert sources(data)["red"]["framesFresh"] is False
        assert "no frame" in str(sources(data)["red"]["error"]), sources(data)["red"]

        rtsp.start()  # same port, same URL: the StreamSet's retries find frames again
        wait_for("Ready again", lambda: _ready(cli) == "True", READY_BOUND_S)
    finally:
        print(f"--- RTSP server log ---\n{rtsp.log_tail()}")  # shown when the test fails
        rtsp.stop()
        assert daemon.terminate() == 0, daemon.log()
