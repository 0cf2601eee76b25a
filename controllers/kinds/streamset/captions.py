"""Live caption sessions: one streaming ``generate_captions`` request per source, kept open.

Why a hub that outlives a reconcile pass: a caption session is a long-lived SSE connection, not
an action; the daemon keeps it running between passes and the StreamSet controller reads the
last caption and its age to decide Ready/Degraded. In a one-shot ``apply`` the sessions live as
long as the process and end with it (the service sees the connection close).

Why backoff inside the session: a 503 ``ServerBusy`` means the service is at capacity; retrying
at once would be the request storm the field guides warn about. Each session waits a growing,
capped delay between attempts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controllers.clients.rtvi_client import RtviClient
from controllers.errors import ControllerError
from controllers.kinds.streamset.caption_events import chunks_of

RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
READ_TIMEOUT_S = 120.0


@dataclass
class CaptionState:
    """What one session has seen; read by the controller, written by the session thread."""

    text: str = ""
    at: float | None = None  # time.time() of the last chunk
    chunks: int = 0
    empty_chunks: int = 0  # chunks that decoded no frame: no data, not a caption
    latency_ms: float | None = None
    error: str = ""

    def age_s(self, now: float | None = None) -> float | None:
        return None if self.at is None else (now or time.time()) - self.at


class CaptionSession:
    def __init__(self, client_factory: Callable[[], RtviClient], body: dict[str, Any]) -> None:
        self.body = body
        self.state = CaptionState()
        self._client_factory = client_factory
        self._client: RtviClient | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"captions-{body['id'][:8]}")
        self._thread.start()

    def _run(self) -> None:
        delay = RETRY_FIRST_S
        while not self._stop.is_set():
            client = self._client = self._client_factory()
            try:
                for event in client.caption_events(self.body, READ_TIMEOUT_S):
                    if self._stop.is_set():
                        return
                    self._record(event)
                    delay = RETRY_FIRST_S
            except ControllerError as exc:  # RtviBusy (503) included: its text says so
                self.state.error = str(exc)
            except Exception as exc:  # a malformed event must not end the session for good
                self.state.error = f"{type(exc).__name__}: {exc}"
            finally:
                client.close()
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, RETRY_MAX_S)

    def _record(self, event: dict[str, Any]) -> None:
        for chunk in chunks_of(event):  # flat, wrapped (the spec's) or chat-shaped alike
            if chunk.error:
                self.state.error = f"RTVI reported an error in a caption: {chunk.error}"
                continue
            if chunk.frame_count == 0:  # "0 frames, 0 latency" means no data
                self.state.empty_chunks += 1
                continue
            if not chunk.content:
                continue
            self.state.text, self.state.at = chunk.content, time.time()
            self.state.chunks += 1
            self.state.error = ""
            if chunk.chunk_latency_ms is not None:
                self.state.latency_ms = chunk.chunk_latency_ms

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop and close the connection now, so the service sees the subscriber leave."""
        self._stop.set()
        client = self._client
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


class CaptionHub:
    """One session per stream ID (IDs are unique: UUIDv5 of instance, StreamSet, source);
    thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # stream → ((service, its API token), session)
        self._sessions: dict[str, tuple[tuple[str, str | None], CaptionSession]] = {}

    def ensure(self, base_url: str, stream: str, body: dict[str, Any],
               token: str | None = None) -> CaptionState:
        """Start (or keep) the session for ``stream``; another service, token or request
        body, or a session that died, starts a new one."""
        service = (base_url, token)
        with self._lock:
            was, current = self._sessions.get(stream, (service, None))
            if current is not None and (was, current.body) == (service, body) and current.alive:
                return current.state
            if current is not None:
                current.stop()
            session = CaptionSession(lambda: RtviClient(base_url, timeout_s=READ_TIMEOUT_S,
                                                        token=token), body)
            self._sessions[stream] = (service, session)
            return session.state

    def forget_stream(self, stream: str) -> None:
        """Stop the session on ``stream``, if there is one."""
        with self._lock:
            entry = self._sessions.pop(stream, None)
        if entry is not None:
            entry[1].stop()

    def close(self) -> None:
        with self._lock:
            entries, self._sessions = list(self._sessions.values()), {}
        for _, session in entries:
            session.stop()
