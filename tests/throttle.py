"""A slow link on loopback: a TCP relay to a real server, at most ``rate`` bytes a second
toward the client, that can be cut (every connection closed at once, as a network that goes
away). A pull over it takes seconds, so a test can act in the middle of one."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

CHUNK = 64 * 1024


class SlowLink:
    def __init__(self, target: tuple[str, int], rate: float) -> None:
        self.target, self.rate = target, rate
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.port = 0
        self.restore()

    def restore(self) -> None:
        """Listen (again, on the same port once it had one)."""
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.rate),
                             daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, rate: float | None) -> None:
        start, sent = time.monotonic(), 0
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
                sent += len(data)
                if rate is not None:  # never ahead of the rate
                    time.sleep(max(0.0, sent / rate - (time.monotonic() - start)))
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Close the listener and every connection: the registry is gone. (A listener only
        closed stays in a blocked accept(): shut down first, which wakes it.)"""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
