"""A real RTSP test source: GStreamer's RTSP server serving solid colours, one mount per colour.

Two halves in one file:
- run as a script by Debian's ``/usr/bin/python3`` (which owns the ``gi`` bindings), it serves
  ``rtsp://127.0.0.1:PORT/<name>`` for every ``--mount name=RRGGBB[:border=RRGGBB]``: a 320x240,
  10 fps ``videotestsrc pattern=solid-color`` encoded by x264 (zerolatency, keyframe every 10
  frames so a late decoder starts within a second). A border is a full-frame source of the
  border colour with the centre colour composited over its middle 75 %;
- imported by the tests (venv python), :class:`RtspSource` starts that script and polls every
  mount with a real RTSP ``DESCRIBE`` until each answers 200 -- readiness, not a sleep.

The encoder input is forced to I420: left to negotiate, ``videoconvert`` hands x264 4:4:4
(``Y444_10LE``), x264 encodes High 4:4:4, a client asking for baseline makes x264 fail
(``baseline profile doesn't support 4:4:4``) and gst-rtsp-server then aborts
(``gst_rtsp_media_get_rates: assertion failed``), so every later test of the session timed out.
The publisher (``controllers/kinds/streamset/publisher/app.py``) forces I420 for the same reason. A
dead server is reported by :meth:`RtspSource.url` with the server's log, instead of cascading
timeouts.

Loopback only: the server binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
LOOPBACK = "127.0.0.1"
WIDTH, HEIGHT, FPS = 320, 240, 10
CENTRE_WIDTH, CENTRE_HEIGHT = 240, 180
READY_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.05
LOG_TAIL_CHARS = 4000
DESCRIBE_READ_MAX = 65536
ENCODER = (
    "video/x-raw,format=I420 ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 ! "
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


def describe(port: int, name: str, timeout: float = 2.0) -> bytes:
    """The whole answer (headers and SDP) of ``DESCRIBE rtsp://127.0.0.1:port/name``; b"" when
    the server does not answer."""
    url = f"rtsp://{LOOPBACK}:{port}/{name}"
    request = f"DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\nAccept: application/sdp\r\n\r\n"
    answer = b""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as conn:
            conn.sendall(request.encode())
            while b"\r\n\r\n" not in answer and len(answer) < DESCRIBE_READ_MAX:
                chunk = conn.recv(DESCRIBE_READ_MAX)
                if not chunk:
                    return answer
                answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            length = _content_length(head)
            while len(body) < length:
                chunk = conn.recv(DESCRIBE_READ_MAX)
                if not chunk:
                    break
                body += chunk
            return head + b"\r\n\r\n" + body
    except OSError:
        return answer


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return 0


def describe_ok(port: int, name: str, timeout: float = 2.0) -> bool:
    """True when ``rtsp://127.0.0.1:port/name`` answers a DESCRIBE with 200."""
    return describe(port, name, timeout).startswith(b"RTSP/1.0 200")


class _NotReady(AssertionError):
    """Not serving yet (retried), unlike a plain AssertionError for a dead server."""


@dataclass
class RtspSource:
    """Test half: the script as a subprocess, with its mounts."""

    port: int
    mounts: dict[str, tuple[str, str | None]]
    log: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def url(self, name: str) -> str:
        """The URL of mount ``name``; fails the calling test at once, with the server's log,
        if the server has died (a test of a missing mount still gets its URL)."""
        self.assert_alive()
        return f"rtsp://{LOOPBACK}:{self.port}/{name}"

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError as exc:
            return f"(no log: {exc})"

    def assert_alive(self) -> None:
        """AssertionError naming the exit status and the server's log if it is not running."""
        if self.process is None:
            return  # not started yet: a test may hand out the URL of a source it starts later
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"RTSP source on port {self.port} died (exit {code}); "
                                 f"its log:\n{self.log_tail()}")

    def assert_serving(self) -> None:
        """Alive and every mount answers DESCRIBE; else AssertionError with the server's log."""
        self.assert_alive()
        failing = sorted(name for name in self.mounts if not describe_ok(self.port, name))
        if failing:
            self.assert_alive()  # it may have died while being asked
            raise AssertionError(f"RTSP source on port {self.port} does not serve {failing}; "
                                 f"its log:\n{self.log_tail()}")

    def start(self, timeout: float = READY_TIMEOUT_S) -> None:
        # tenacity lives in the test virtualenv only; the script half runs under Debian's python.
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

        argv = [SYSTEM_PYTHON, str(Path(__file__).resolve()), "--port", str(self.port)]
        for name, (centre, border) in self.mounts.items():
            argv += ["--mount", f"{name}={centre}" + (f":border={border}" if border else "")]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        for attempt in Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(POLL_INTERVAL_S),
                                retry=retry_if_exception_type(_NotReady), reraise=True):
            with attempt:
                self.assert_alive()  # a dead server is final: AssertionError is not retried
                if not all(describe_ok(self.port, name) for name in self.mounts):
                    raise _NotReady(f"RTSP mounts not ready; log:\n{self.log_tail()}")

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
