"""Serve an HTTP server from a thread of the test process for the length of a ``with`` block."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager

POLL_INTERVAL_S = 0.05  # how long shutdown() waits for serve_forever to notice


@contextmanager
def served(server: socketserver.BaseServer, name: str) -> Iterator[None]:
    """Serve until the block ends; then shut down, close the socket and join the thread."""
    thread = threading.Thread(target=server.serve_forever, name=name,
                              kwargs={"poll_interval": POLL_INTERVAL_S}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
