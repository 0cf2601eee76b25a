"""HTTP server glue, signal handling and ``main()`` of the RTVI emulator.

Why ``serve_forever`` on a thread and a pipe in the main thread: a signal handler must not call
``server.shutdown()`` (it blocks until ``serve_forever`` returns, a deadlock when both run on the
main thread) nor take a lock the interrupted code may hold. The handler only writes one byte to a
pipe; the main thread, blocked reading that pipe, then shuts the server down and returns the exit
code. A fatal fault from the lifecycle thread uses the same pipe, so there is one way out.

Why HTTP/1.1 with exact Content-Length: the product's client (httpx) keeps connections alive;
every response, errors included, carries a length so a connection is never left ambiguous.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import hmac
import http
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

from emulators.rtvi import core, gpu, logs, recorder
from emulators.rtvi.app import Application
from emulators.rtvi.config import ConfigError, load_settings
from emulators.rtvi.lifecycle import Lifecycle
from emulators.rtvi.routing import (
    UNMATCHED_ROUTE,
    Match,
    MethodNotAllowed,
    Request,
    Response,
    Router,
)
from emulators.rtvi.state import ServiceState

SHUTDOWN_REPORT_S = 5.0  # every thread's stack to stderr if shutting down takes longer
POLL_INTERVAL_S = 0.05  # bounds how long shutdown() waits for serve_forever to notice
LISTEN_BACKLOG = 128
MAX_BODY_BYTES = 64 * 1024 * 1024  # bodies are JSON for now; uploads come with the files issue
CONFIG_ERROR_EXIT_CODE = 2
LISTEN_ERROR_EXIT_CODE = 1
HANDLED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
UNAUTHORIZED_CODE = "Unauthorized"


def build_router(app: Application | None = None) -> Router:
    """Every endpoint group registers here; without ``app`` only the stateless core group."""
    router = Router()
    core.register(router)
    if app is not None:
        app.register(router)
    return router


class ChunkedWriter:
    """Writes a streaming body with chunked transfer coding; notices a departed client."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        self._handler = handler
        self._gone = False

    def write(self, data: bytes) -> bool:
        if self._gone:
            return False
        try:
            self._handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self._handler.wfile.flush()
        except OSError:
            self._gone = True
        return not self._gone

    def alive(self) -> bool:
        """Readable with nothing to read means the peer closed (or reset) its side."""
        if self._gone:
            return False
        connection = self._handler.connection
        try:
            readable, _, _ = select.select([connection], [], [], 0)
            if readable and not connection.recv(1, socket.MSG_PEEK):
                self._gone = True
        except OSError:
            self._gone = True
        return not self._gone

    def end(self) -> None:
        """The terminating zero-length chunk."""
        if not self._gone:
            with contextlib.suppress(OSError):
                self._handler.wfile.write(b"0\r\n\r\n")
                self._handler.wfile.flush()


class RecordingWriter:
    """Passes a streaming body through and keeps each SSE ``data:`` payload for the recorder."""

    def __init__(self, inner: ChunkedWriter) -> None:
        self._inner = inner
        self.payloads: list[str] = []

    def write(self, data: bytes) -> bool:
        sent = self._inner.write(data)
        if sent and len(self.payloads) < recorder.MAX_EVENTS:
            self.payloads.extend(recorder.sse_payloads(data))
        return sent

    def alive(self) -> bool:
        return self._inner.alive()


class ExitLatch:
    """First requested exit code wins; ``wait`` blocks the main thread until one is requested."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        self.code: int | None = None

    def request(self, code: int) -> None:
        if self.code is None:
            self.code = code
        with contextlib.suppress(OSError):  # closed during shutdown: nothing left to wake
            os.write(self._write_fd, b"x")

    def wait(self) -> int:
        while self.code is None:
            os.read(self._read_fd, 1)  # EINTR is retried after the signal handler ran (PEP 475)
        return self.code

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)


class EmulatorServer(ThreadingHTTPServer):
    """Holds what handlers need; request threads are daemons so exit never waits on a client."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        router: Router,
        state: ServiceState,
        sink: logs.LogSink,
        app: Application | None = None,
    ) -> None:
        self.router = router
        self.state = state
        self.sink = sink
        self.app = app
        super().__init__(address, EmulatorHandler)

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up mid-answer (the healthcheck reads 64 bytes and leaves) is
        normal, not a traceback in the service log; anything else is reported as before."""
        if isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class BodyError(ValueError):
    """The request body cannot be read (bad length, bad chunking, too large)."""


class EmulatorHandler(BaseHTTPRequestHandler):
    """Turns each HTTP request into a :class:`Request`, routes it, writes the :class:`Response`."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    # Headers and body go out in separate writes; with Nagle on, the second request on a
    # kept-alive connection waited ~40 ms for the client's delayed ACK (uvicorn sets
    # TCP_NODELAY, so the real service does not).
    disable_nagle_algorithm = True

    def version_string(self) -> str:
        return self.server_version

    @property
    def emulator(self) -> EmulatorServer:
        assert isinstance(self.server, EmulatorServer)
        return self.server

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def _dispatch(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        path = split.path or "/"
        try:
            body = self._read_body()
        except BodyError as exc:
            self.close_connection = True
            error = Response.error(400, "BadRequest", str(exc))
            self._write(error)
            self._finish(path, UNMATCHED_ROUTE, error)
            return
        request = Request(
            method=self.command,
            path=path,
            query=urllib.parse.parse_qs(split.query, keep_blank_values=True),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        route, response = self._route(request)
        if response.stream is None:
            # On record before the client can read the answer: a test that reads the record
            # right after its call returns must find the exchange there.
            self._record(request, response, None)
            self._write(response)
        else:  # a stream's events are known only once it has been sent
            self._record(request, response, self._write(response))
        self._finish(path, route, response)

    def _record(self, request: Request, response: Response, events: list[str] | None) -> None:
        app = self.emulator.app
        if app is None or not app.recorder.enabled or not request.path.startswith("/v1/"):
            return
        app.recorder.record(
            request.method,
            request.path,
            request.query,
            (request.headers.get("content-type", ""), request.body),
            response.status,
            (response.content_type, response.body),
            events,
        )

    def _route(self, request: Request) -> tuple[str, Response]:
        resolved = self.emulator.router.resolve(request.method, request.path)
        app = self.emulator.app
        if app is not None and isinstance(resolved, Match):
            app.count(f"{request.method} {resolved.route.template}")
        refused = self._unauthorized(request)
        if refused is not None:
            template = resolved.route.template if isinstance(resolved, Match) else ""
            return template or UNMATCHED_ROUTE, refused
        if app is not None:
            decision = app.faults.decide(request.path)
            if decision.delay_s > 0:
                time.sleep(decision.delay_s)
            if decision.response is not None:
                template = resolved.route.template if isinstance(resolved, Match) else ""
                return template or UNMATCHED_ROUTE, decision.response
        if isinstance(resolved, Match):
            routed = dataclasses.replace(request, params=resolved.params)
            try:
                return resolved.route.template, resolved.route.handler(self.emulator.state, routed)
            except Exception as exc:  # a handler bug must answer 500, not drop the connection
                where = traceback.extract_tb(exc.__traceback__)[-1]
                self.emulator.sink.error(
                    f"ERROR:    Exception in handler {resolved.route.template}: "
                    f"{type(exc).__name__} at {os.path.basename(where.filename)}:{where.lineno}"
                )
                error = Response.error(500, "InternalServerError", "Internal server error")
                return resolved.route.template, error
        if isinstance(resolved, MethodNotAllowed):
            allow = (("Allow", ", ".join(resolved.allowed)),)
            message = f"Method {request.method} not allowed for {request.path}"
            return resolved.template, Response.error(405, "MethodNotAllowed", message, allow)
        message = f"No route for {request.method} {request.path}"
        return UNMATCHED_ROUTE, Response.error(404, "NotFound", message)

    def _unauthorized(self, request: Request) -> Response | None:
        """401 for a ``/v1/`` request without the configured bearer token (none set: open).
        The token is compared in constant time and never echoed."""
        token = self.emulator.state.settings.api_token
        if token is None or not request.path.startswith("/v1/"):
            return None
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), token.encode()
        ):
            return None
        return Response.error(
            401,
            UNAUTHORIZED_CODE,
            "Missing or invalid bearer token",
            (("WWW-Authenticate", "Bearer"),),
        )

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
        except ValueError:
            raise BodyError("invalid Content-Length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise BodyError("Content-Length out of range")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            size_line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise BodyError("invalid chunk size") from None
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers up to the blank line
                    pass
                return b"".join(chunks)
            total += size
            if total > MAX_BODY_BYTES:
                raise BodyError("body too large")
            chunks.append(self.rfile.read(size))
            self.rfile.readline(16)  # CRLF after each chunk

    def _finish(self, path: str, route: str, response: Response) -> None:
        self.emulator.state.count_request(self.command, route, response.status)
        if self.emulator.state.settings.access_log:
            self.emulator.sink.info(
                logs.access_line(
                    f"{self.client_address[0]}:{self.client_address[1]}",
                    self.command,
                    path,
                    response.status,
                    http.HTTPStatus(response.status).phrase,
                )
            )

    def _write(self, response: Response) -> list[str] | None:
        """Send ``response``; a streamed one returns its SSE ``data:`` payloads."""
        if response.stream is not None and self.command != "HEAD":
            return self._write_stream(response)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)
        return None

    def _write_stream(self, response: Response) -> list[str]:
        """Headers, then the body's chunks as it writes them; the connection closes after."""
        assert response.stream is not None
        self.close_connection = True
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        chunked = ChunkedWriter(self)
        writer = RecordingWriter(chunked)
        try:
            response.stream(writer)
        finally:
            chunked.end()
        return writer.payloads

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Malformed requests (caught by the base class) get the contract's JSON error shape."""
        self.close_connection = True
        status = http.HTTPStatus(code)
        name = "".join(word.capitalize() for word in status.name.split("_"))
        self._write(Response.error(code, name, message or status.phrase))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Silenced: ``_finish`` writes the uvicorn-shaped access line instead."""

    def log_message(self, format: str, *args: object) -> None:
        text = " ".join((format % args).split())  # always one line
        self.emulator.sink.error(f"WARNING:  {self.address_string()} {text}")


def _install_signal_handlers(latch: ExitLatch) -> None:
    def handle(_signum: int, _frame: FrameType | None) -> None:
        latch.request(0)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def main() -> int:
    """Run until SIGTERM/SIGINT (exit 0) or a fatal fault (exit 1); bad knobs exit 2."""
    sink = logs.LogSink(sys.stdout, sys.stderr)
    try:
        settings = load_settings()
        app = Application(settings)
    except ConfigError as exc:
        sink.error(f"ERROR:    {exc}")
        return CONFIG_ERROR_EXIT_CODE
    state = ServiceState(settings, inventory=app)
    latch = ExitLatch()
    _install_signal_handlers(latch)
    try:
        server = EmulatorServer((settings.host, settings.port), build_router(app), state, sink, app)
    except OSError as exc:
        sink.error(f"ERROR:    cannot listen on {settings.host}:{settings.port}: {exc.strerror}")
        app.shutdown()
        return LISTEN_ERROR_EXIT_CODE
    sink.info(logs.server_process_line(os.getpid()))
    for name in settings.echo_env:  # a service that logs its configuration, secrets included
        sink.info(f"INFO:     config {name}={os.environ.get(name, '')}")
    serving = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": POLL_INTERVAL_S},
        name="rtvi-http",
        daemon=True,
    )
    serving.start()
    lifecycle = Lifecycle(state, sink, latch.request, (settings.host, server.server_port))
    lifecycle.start()
    code = latch.wait()
    # A shutdown that hangs past a stop's grace is killed without a word; this says where.
    faulthandler.dump_traceback_later(SHUTDOWN_REPORT_S, exit=False)
    lifecycle.stop()
    app.shutdown()  # ends caption loops (their SSE connections close) and kills every decoder
    gpu.release(settings, sink)
    server.shutdown()
    server.server_close()
    latch.close()
    sink.info(f"{logs.UVICORN_PREFIX}Shutting down")
    sink.info(f"{logs.UVICORN_PREFIX}Finished server process [{os.getpid()}]")
    return code
