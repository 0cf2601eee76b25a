"""A real RTSP test source: GStreamer's RTSP server serving solid colours, one mount per colour.

Two halves in one file:
- run as a script by Debian's ``/usr/bin/python3`` (which owns the ``gi`` bindings), it serves
  ``rtsp://127.0.0.1:PORT/<name>`` for every ``--mount name=RRGGBB[:border=RRGGBB]``: a 320x240,
  10 fps ``videotestsrc pattern=solid-color`` encoded by x264 (zerolatency, keyframe every 10
  frames so a late decoder starts within a second). A border is a full-frame source of the
  border colour with the centre colour composited over its middle 75 %;
- imported by the tests (venv python), :class:`RtspSource` starts that script and polls every
  mount with a real RTSP ``DESCRIBE`` until each answers 200 -- readiness, not a sleep.

Loopback only: the server binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
LOOPBACK = "127.0.0.1"
WIDTH, HEIGHT, FPS = 320, 240, 10
CENTRE_WIDTH, CENTRE_HEIGHT = 240, 180
ENCODER = (
    "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 ! "
    "rtph264pay name=pay0 pt=96 config-interval=1"
)


def _solid(rgb: str, width: int, height: int) -> str:
    return (
        f"videotestsrc is-live=true pattern=solid-color foreground-color=0xFF{rgb} ! "
        f"video/x-raw,width={width},height={height},framerate={FPS}/1"
    )


def launch_line(centre: str, border: str | None) -> str:
    """The GStreamer launch description of one mount."""
    if border is None:
        return f"( {_solid(centre, WIDTH, HEIGHT)} ! videoconvert ! {ENCODER} )"
    x = (WIDTH - CENTRE_WIDTH) // 2
    y = (HEIGHT - CENTRE_HEIGHT) // 2
    return (
        f"( compositor name=mix sink_1::xpos={x} sink_1::ypos={y} ! "
        f"video/x-raw,width={WIDTH},height={HEIGHT} ! videoconvert ! {ENCODER} "
        f"{_solid(border, WIDTH, HEIGHT)} ! mix.sink_0 "
        f"{_solid(centre, CENTRE_WIDTH, CENTRE_HEIGHT)} ! mix.sink_1 )"
    )


def serve(port: int, mounts: Mapping[str, tuple[str, str | None]]) -> None:
    """Script half: run the RTSP server until killed."""
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address(LOOPBACK)
    server.set_service(str(port))
    points = server.get_mount_points()
    for name, (centre, border) in mounts.items():
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(launch_line(centre, border))
        factory.set_shared(True)
        points.add_factory(f"/{name}", factory)
    if server.attach(None) == 0:
        print("cannot attach the RTSP server", file=sys.stderr, flush=True)
        raise SystemExit(1)
    GLib.MainLoop().run()


def _parse_mount(text: str) -> tuple[str, tuple[str, str | None]]:
    name, _, spec = text.partition("=")
    centre, _, border = spec.partition(":border=")
    return name, (centre.upper(), border.upper() or None)


def describe_ok(port: int, name: str, timeout: float = 2.0) -> bool:
    """True when ``rtsp://127.0.0.1:port/name`` answers a DESCRIBE with 200."""
    url = f"rtsp://{LOOPBACK}:{port}/{name}"
    request = f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n"
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as conn:
            conn.sendall(request.encode())
            return conn.recv(64).startswith(b"RTSP/1.0 200")
    except OSError:
        return False


@dataclass
class RtspSource:
    """Test half: the script as a subprocess, with its mounts."""

    port: int
    mounts: dict[str, tuple[str, str | None]]
    log: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def url(self, name: str) -> str:
        return f"rtsp://{LOOPBACK}:{self.port}/{name}"

    def start(self, timeout: float = 20.0) -> None:
        argv = [SYSTEM_PYTHON, str(Path(__file__).resolve()), "--port", str(self.port)]
        for name, (centre, border) in self.mounts.items():
            argv += ["--mount", f"{name}={centre}" + (f":border={border}" if border else "")]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        pending = set(self.mounts)
        while pending:
            if self.process.poll() is not None:
                raise AssertionError(f"RTSP source exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"RTSP mounts not ready: {sorted(pending)}")
            pending = {name for name in pending if not describe_ok(self.port, name)}
            if pending:
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mount", action="append", default=[], type=_parse_mount)
    args = parser.parse_args()
    serve(args.port, dict(args.mount))


if __name__ == "__main__":
    main()
