"""The real re-publish: one GStreamer RTSP server, one ``/live/<sensorId>`` mount per sensor.

Why GstRtspServer rather than a proxy of our own: consumers must decode real frames through the
emulator, with the RTSP handshake, RTP over TCP and H.264 they will meet at the real VST. Each
mount relays its source without re-encoding (``rtspsrc ! rtph264depay ! rtph264pay``), so decoded
colours match the source.

Why one GLib main loop on its own thread, and every change marshalled onto it: GstRtspServer
objects belong to the main context they are attached to. The HTTP threads never touch them
directly; :meth:`Relay._call` runs a function on the loop's thread and waits for its result, which
also serialises all changes.

Why shared media: every consumer of one sensor reads the same upstream connection, as a VST relay
does, and the source sees one client however many consumers there are.

"Reconnect when the source was not up yet": the upstream connection is made when the first
consumer connects (not at ``sensor/add``). If the source is down then, that consumer gets an error
and the failed media is dropped from the factory's cache, so a later consumer tries the source
afresh; a source that comes up late is picked up without any action.

Credentials go to ``rtspsrc`` as properties, never into a launch string, so they cannot appear in
GStreamer's debug output or our logs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

from emulators.vst.source import Source  # noqa: E402

LIVE_PREFIX = "/live/"
SOURCE_LATENCY_MS = 100
SOURCE_TCP_TIMEOUT_US = 5_000_000  # a dead source fails the media instead of hanging a consumer
CALL_TIMEOUT_S = 10.0
RELAY_BIN = (
    "rtspsrc name=src protocols=tcp latency={latency} ! rtph264depay ! h264parse "
    "! rtph264pay name=pay0 pt=96 config-interval=-1"
)

T = TypeVar("T")


class RelayError(RuntimeError):
    """The RTSP server could not start (port taken) or its loop did not answer in time."""


class _RelayFactory(GstRtspServer.RTSPMediaFactory):  # type: ignore[misc]
    """Builds the relay bin for one sensor, setting the source and its credentials as properties.

    ``config-interval=-1`` repeats SPS/PPS with every key frame, so a consumer joining a shared
    media mid-stream can decode from the next key frame on.
    """

    def __init__(self, source: Source) -> None:
        super().__init__()
        self._source = source
        self.set_shared(True)
        self.set_stop_on_disconnect(True)

    def do_create_element(self, _url: Any) -> Any:
        relay = Gst.parse_bin_from_description(RELAY_BIN.format(latency=SOURCE_LATENCY_MS), False)
        src = relay.get_by_name("src")
        src.set_property("location", self._source.url)
        src.set_property("tcp-timeout", SOURCE_TCP_TIMEOUT_US)
        if self._source.username:
            src.set_property("user-id", self._source.username)
        if self._source.password:
            src.set_property("user-pw", self._source.password)
        return relay


class Relay:
    """The RTSP server and its GLib loop; all public methods are safe from any thread."""

    def __init__(self, host: str, port: int) -> None:
        Gst.init(None)
        self._context = GLib.MainContext.new()
        self._loop = GLib.MainLoop.new(self._context, False)
        self._server = GstRtspServer.RTSPServer.new()
        self._server.set_address(host)
        self._server.set_service(str(port))
        self._thread = threading.Thread(target=self._run, name="vst-rtsp", daemon=True)
        self._source_id = 0
        self.port = 0

    def start(self) -> int:
        """Listen and start the loop; returns the bound port. Raises :class:`RelayError`."""
        try:
            self._source_id = self._server.attach(self._context)
        except GLib.Error as exc:  # the bind happens here: a taken port surfaces now
            raise RelayError(f"cannot listen for RTSP: {exc.message}") from None
        if self._source_id == 0:
            raise RelayError("cannot listen for RTSP")
        self.port = int(self._server.get_bound_port())
        self._thread.start()
        return self.port

    def stop(self) -> None:
        """Close every consumer and end the loop; idempotent."""
        if not self._thread.is_alive():
            return
        self._call(self._close_all_clients)
        self._context.invoke_full(GLib.PRIORITY_DEFAULT, self._quit)
        self._thread.join(CALL_TIMEOUT_S)

    def publish(self, sensor_id: str, source: Source) -> None:
        """Serve ``source`` at ``/live/<sensor_id>`` (replacing any earlier mount there)."""

        def mount() -> None:
            self._server.get_mount_points().add_factory(_path(sensor_id), _RelayFactory(source))

        self._call(mount)

    def unpublish(self, sensor_id: str) -> None:
        """Stop serving ``/live/<sensor_id>``: new connects get 404, current consumers are cut."""
        path = _path(sensor_id)

        def unmount() -> None:
            self._server.get_mount_points().remove_factory(path)
            self._close_clients_of(path)

        self._call(unmount)

    # --- on the loop's thread -------------------------------------------------------------

    def _run(self) -> None:
        self._context.push_thread_default()
        try:
            self._loop.run()
        finally:
            self._context.pop_thread_default()

    def _quit(self) -> bool:
        self._loop.quit()
        return GLib.SOURCE_REMOVE  # type: ignore[no-any-return]

    def _close_all_clients(self) -> None:
        for client in self._server.client_filter(None):
            client.close()

    def _close_clients_of(self, path: str) -> None:
        """Close every client with a session on the media mounted at ``path``.

        Closing the connection (rather than only stopping the media) makes a consumer see the
        loss at once, as with a VST that stops serving, instead of waiting on a silent socket.
        """
        for client in self._server.client_filter(None):
            if any(
                session_media.matches(path)[0]
                for session in client.session_filter(None)
                for session_media in session.filter(None)
            ):
                client.close()

    def _call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the loop's thread and return its result (or raise its error)."""
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            return function()
        done = threading.Event()
        outcome: list[T] = []
        failure: list[BaseException] = []

        def run() -> bool:
            try:
                outcome.append(function())
            except BaseException as exc:  # handed back to the calling thread
                failure.append(exc)
            finally:
                done.set()
            return GLib.SOURCE_REMOVE  # type: ignore[no-any-return]

        self._context.invoke_full(GLib.PRIORITY_DEFAULT, run)
        if not done.wait(CALL_TIMEOUT_S):
            raise RelayError("the RTSP loop did not answer in time")
        if failure:
            raise failure[0]
        return outcome[0]


def _path(sensor_id: str) -> str:
    return f"{LIVE_PREFIX}{sensor_id}"
