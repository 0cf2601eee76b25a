"""The RTVI emulator served from a thread of the test process, decoding nothing.

Why: stream teardown's rules (batch deletes, the drain window, ``ResourceInUse`` retried,
absence confirmed by listing) are safety rules, and they belong in the fast layer that a
mutation run uses. The emulator process costs seconds to start and decodes real video; the
same application (``emulators.rtvi``), served on loopback from a thread with
``RTVI_EMU_NO_DECODE=1``, answers the same HTTP API in milliseconds. Faults and knobs are set
on the application object directly, as the admin endpoints would.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from controllers.clients.rtvi_client import ChatAnswer, RtviClient
from emulators.rtvi import logs
from emulators.rtvi.app import Application
from emulators.rtvi.config import load_settings
from emulators.rtvi.faults import BehaviourFault
from emulators.rtvi.server import EmulatorServer, build_router
from emulators.rtvi.state import ServiceState
from tests.serving import served


@dataclass
class InprocRtvi:
    app: Application
    server: EmulatorServer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def stream_ids(self) -> set[str]:
        """Every stream the service holds, draining ones included."""
        return {s.id for s in self.app.streams.listing()}

    def stuck(self, *stream_ids: str) -> None:
        """Deleting these answers 409 ResourceInUse until :meth:`unstuck`."""
        self.app.faults.add_behaviour(BehaviourFault("stuck_delete", tuple(stream_ids)))

    def unstuck(self) -> None:
        self.app.faults.clear()

    def requests(self, route: str) -> int:
        return self.app.requests().get(route, 0)


@contextmanager
def inproc_rtvi(**env: str) -> Iterator[InprocRtvi]:
    """A ready RTVI emulator on 127.0.0.1 (a free port); ``env``: its RTVI_EMU_* knobs."""
    settings = load_settings({"RTVI_EMU_HOST": "127.0.0.1", "RTVI_EMU_PORT": "0",
                              "RTVI_EMU_NO_DECODE": "1", "RTVI_EMU_ACCESS_LOG": "0", **env})
    app = Application(settings)
    state = ServiceState(settings, inventory=app)
    state.mark_ready()
    sink = logs.LogSink(io.StringIO(), io.StringIO())
    server = EmulatorServer(("127.0.0.1", 0), build_router(app), state, sink, app)
    with served(server, "inproc-rtvi"):
        try:
            yield InprocRtvi(app, server)
        finally:
            app.shutdown()  # decoders and caption loops first, as the emulator's main() does


def ask(prompt: str, **env: str) -> ChatAnswer:
    """One text chat completion from a fresh in-process emulator with ``env`` knobs."""
    with inproc_rtvi(**env) as rtvi:
        client = RtviClient(rtvi.url)
        try:
            return client.chat({"model": "m", "messages": [{"role": "user", "content": prompt}]},
                               10)
        finally:
            client.close()
