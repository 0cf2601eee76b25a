"""HTTP glue, start-up order, signal handling and ``main()`` of the VST emulator.

Threads: the GLib loop of the relay runs on its own thread; each HTTP request runs on its own
daemon thread (``ThreadingHTTPServer``); the main thread runs ``serve_forever``.

Why SIGTERM raises an exception in the main thread: the handler must not call
``server.shutdown()`` (it waits for ``serve_forever``, which runs on that very thread). Raising
:class:`Terminate` unwinds ``serve_forever`` the way ``KeyboardInterrupt`` does, and the
``finally`` below closes the listener and the relay; the process then exits 0. The main thread
holds no lock while it waits in ``select``, so unwinding there is safe.

Why every response carries an exact Content-Length on HTTP/1.1: clients (httpx) keep connections
alive, and a response without a length would leave the connection ambiguous.

Logs go to stderr, one line per event. They never hold a password: request bodies are not logged
and source URLs are logged with their user info redacted.
"""

from __future__ import annotations

import json
import signal
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

from emulators.vst import api
from emulators.vst.knobs import KnobError, load_knobs
from emulators.vst.sensors import Inventory

POLL_INTERVAL_S = 0.05
MAX_BODY_BYTES = 1024 * 1024  # sensor/add bodies are tiny; anything larger is a client bug
CONTENT_TYPE = "text/plain; charset=utf-8"  # what the real VST sends for its JSON (see api)
KNOB_ERROR_EXIT_CODE = 2
LISTEN_ERROR_EXIT_CODE = 1


class Terminate(Exception):
    """Raised by the SIGTERM/SIGINT handler to unwind ``serve_forever`` on the main thread."""


def log(message: str) -> None:
    print(f"vst-emulator: {message}", file=sys.stderr, flush=True)


class ApiServer(ThreadingHTTPServer):
    """Carries the handlers' context; request threads are daemons so exit never waits on one."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], context: api.Context) -> None:
        self.context = context
        super().__init__(address, ApiHandler)


class ApiHandler(BaseHTTPRequestHandler):
    """Reads the body, lets :func:`api.handle` answer, writes JSON with an exact length."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # see the RTVI emulator's handler: no 40 ms ACK waits

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_DELETE = do_PUT = do_PATCH = do_GET

    def _dispatch(self) -> None:
        assert isinstance(self.server, ApiServer)
        path = urllib.parse.urlsplit(self.path).path
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            # No chunked bodies: clients send JSON with a length. Close: the body is unread.
            self.close_connection = True
            reply = api.error(411, "VMSInvalidParameter", "a Content-Length body is required")
        else:
            body = self.rfile.read(int(length))
            try:
                reply = api.handle(self.server.context, self.command, path, body)
            except Exception as exc:  # a bug answers 500 rather than dropping the connection
                log(f"error in {self.command} {path}: {type(exc).__name__}")
                reply = api.error(500, "VMSInternalError", "internal error")
        self._write(reply)
        log(f"{self.command} {path} {reply.status}")

    def _write(self, reply: api.Reply) -> None:
        payload = json.dumps(reply.payload, separators=(",", ":")).encode("utf-8")
        self.send_response(reply.status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Silenced: ``_dispatch`` writes the access line itself."""

    def log_message(self, format: str, *args: object) -> None:
        """The base class's own lines (malformed requests) become one of ours."""
        log(" ".join((format % args).split()))


def _raise_terminate(_signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not interrupt cleanup
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Terminate


def main() -> int:
    """Run until SIGTERM/SIGINT (exit 0); bad knobs exit 2; a port that is taken exits 1."""
    try:
        knobs = load_knobs()
    except KnobError as exc:
        log(f"bad knob: {exc}")
        return KNOB_ERROR_EXIT_CODE
    # GStreamer is loaded only here: the HTTP API and the inventory are served without it
    # in-process by the tests (tests/inproc_vst.py), with a relay that mounts nothing.
    from emulators.vst.relay import Relay, RelayError

    relay = Relay(knobs.host, knobs.rtsp_port)
    try:
        rtsp_port = relay.start()
    except RelayError as exc:
        log(str(exc))
        return LISTEN_ERROR_EXIT_CODE

    def live_url(sensor_id: str) -> str:
        return f"rtsp://{knobs.host}:{rtsp_port}/live/{sensor_id}"

    inventory = Inventory(relay, knobs.url_delay_s, live_url)
    try:
        server = ApiServer((knobs.host, knobs.http_port), api.Context(inventory, knobs, rtsp_port))
    except OSError as exc:
        log(f"cannot listen on {knobs.host}:{knobs.http_port}: {exc.strerror}")
        relay.stop()
        return LISTEN_ERROR_EXIT_CODE
    signal.signal(signal.SIGTERM, _raise_terminate)
    signal.signal(signal.SIGINT, _raise_terminate)
    log(f"HTTP on {knobs.host}:{server.server_port}, RTSP on {knobs.host}:{rtsp_port}")
    try:
        server.serve_forever(poll_interval=POLL_INTERVAL_S)
    except Terminate:
        log("terminating")
    finally:
        server.server_close()
        relay.stop()
    return 0
