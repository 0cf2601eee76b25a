"""A real RTSP camera for the VST emulator tests: solid colours served by GstRtspServer.

Two halves in one file. Run as a script under Debian's ``/usr/bin/python3`` (the interpreter that
has ``gi``), it serves ``/<name>`` mounts, each a solid colour encoded with x264. Imported by the
tests (any interpreter), :class:`ColourSource` starts that script on a free loopback port, polls
until it accepts connections and kills it afterwards. Why a subprocess: ``gi`` is not importable
from the test virtualenv, and a real process is what the emulator meets in the field.

The encoder input is forced to I420 (as the publisher does): negotiated freely, x264 gets 4:4:4,
fails a client that wants baseline and gst-rtsp-server aborts. The server's output goes to a log
file, not an unread pipe that could fill and stall it, and :meth:`ColourSource.url` fails the
test with that log when the server has died.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.02
LOG_TAIL_CHARS = 4000
COLOUR_PIPELINE = (
    "( videotestsrc is-live=true pattern=solid-color foreground-color=0xFF{rgb:06X} "
    "! video/x-raw,width=160,height=120,framerate=10/1 "
    "! videoconvert ! video/x-raw,format=I420 "
    "! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=10 "
    "! rtph264pay name=pay0 pt=96 config-interval=-1 )"
)


def accepts(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2):
            return True
    except OSError:
        return False


class _NotListening(AssertionError):
    """Not accepting yet (retried), unlike a plain AssertionError for a dead server."""


class ColourSource:
    """A running colour camera: ``url("red")`` is the RTSP URL of the ``red`` mount."""

    def __init__(self, colours: Mapping[str, tuple[int, int, int]], port: int | None = None):
        self.colours = dict(colours)
        if port is None:  # imported here: the script half runs under the system python alone
            from tests.ports import free_port
            port = free_port()
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    def url(self, name: str) -> str:
        """The URL of mount ``name``; AssertionError with the server's log if it has died."""
        self.assert_alive()
        return f"rtsp://{LOOPBACK}:{self.port}/{name}"

    def log_tail(self) -> str:
        if self.log is None:
            return "(not started)"
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError as exc:
            return f"(no log: {exc})"

    def assert_alive(self) -> None:
        if self.process is None:
            return  # not started yet: a test may hand out the URL of a source it starts later
        code = self.process.poll()
        if code is not None:
            raise AssertionError(f"colour source on port {self.port} died (exit {code}); its "
                                 f"log:\n{self.log_tail()}")

    def start(self) -> ColourSource:
        # tenacity lives in the test virtualenv only; the script half runs under Debian's python.
        from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

        args = [f"{name}={r:02X}{g:02X}{b:02X}" for name, (r, g, b) in self.colours.items()]
        handle, log_name = tempfile.mkstemp(prefix="colour-source-", suffix=".log")
        self.log = Path(log_name)
        with open(handle, "wb") as log:
            self.process = subprocess.Popen(
                [SYSTEM_PYTHON, str(Path(__file__).resolve()), "--port", str(self.port), *args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )
        for attempt in Retrying(stop=stop_after_delay(READY_TIMEOUT_S),
                                wait=wait_fixed(POLL_INTERVAL_S),
                                retry=retry_if_exception_type(_NotListening), reraise=True):
            with attempt:
                self.assert_alive()  # a dead server is final: not retried
                if not accepts(self.port):
                    raise _NotListening(f"colour source did not listen in time; log:\n"
                                        f"{self.log_tail()}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=READY_TIMEOUT_S)
        if self.log is not None:
            self.log.unlink(missing_ok=True)


def _serve(port: int, mounts: list[str]) -> None:  # pragma: no cover - runs under gi's python
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    server = GstRtspServer.RTSPServer.new()
    server.set_address(LOOPBACK)
    server.set_service(str(port))
    points = server.get_mount_points()
    for mount in mounts:
        name, _, hex_rgb = mount.partition("=")
        factory = GstRtspServer.RTSPMediaFactory.new()
        factory.set_launch(COLOUR_PIPELINE.format(rgb=int(hex_rgb, 16)))
        factory.set_shared(True)
        points.add_factory(f"/{name}", factory)
    loop = GLib.MainLoop()
    signal.signal(signal.SIGTERM, lambda *_: loop.quit())
    server.attach(None)  # mounts are in place before the port accepts, so "accepts" means ready
    loop.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("mounts", nargs="+", help="NAME=RRGGBB")
    options = parser.parse_args()
    _serve(options.port, options.mounts)
