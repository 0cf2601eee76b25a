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

from controllers.errors import ControllerError
from controllers.rtvi_client import RtviBusy, RtviClient

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
    busy: bool = False
    attempts: int = 0

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
            self.state.attempts += 1
            try:
                for event in client.caption_events(self.body, READ_TIMEOUT_S):
                    if self._stop.is_set():
                        return
                    self._record(event)
                    delay = RETRY_FIRST_S
            except RtviBusy as exc:
                self.state.busy, self.state.error = True, str(exc)
            except ControllerError as exc:
                self.state.busy, self.state.error = False, str(exc)
            except Exception as exc:  # a malformed event must not end the session for good
                self.state.busy, self.state.error = False, f"{type(exc).__name__}: {exc}"
            finally:
                client.close()
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, RETRY_MAX_S)

    def _record(self, event: dict[str, Any]) -> None:
        choices = event.get("choices")
        text = event.get("content")
        if text is None and isinstance(choices, list) and choices:
            first = choices[0] if isinstance(choices[0], dict) else {}
            text = (first.get("delta") or first.get("message") or {}).get("content")
        if not isinstance(text, str) or not text:
            return
        if event.get("frame_count") == 0:  # "0 frames, 0 latency" means no data
            self.state.empty_chunks += 1
            return
        self.state.text, self.state.at = text, time.time()
        self.state.chunks += 1
        self.state.busy, self.state.error = False, ""
        latency = event.get("chunk_latency_ms")
        if isinstance(latency, int | float):
            self.state.latency_ms = float(latency)

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
    """Sessions keyed by (service URL, stream ID); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], CaptionSession] = {}

    def ensure(self, base_url: str, stream: str, body: dict[str, Any]) -> CaptionState:
        """Start (or keep) the session for ``stream``; a changed request body restarts it."""
        with self._lock:
            current = self._sessions.get((base_url, stream))
            if current is not None and current.body == body and current.alive:
                return current.state
            if current is not None:
                current.stop()
            session = CaptionSession(lambda: RtviClient(base_url, timeout_s=READ_TIMEOUT_S), body)
            self._sessions[(base_url, stream)] = session
            return session.state

    def state(self, base_url: str, stream: str) -> CaptionState | None:
        with self._lock:
            session = self._sessions.get((base_url, stream))
            return session.state if session is not None else None

    def stop(self, base_url: str, stream: str) -> bool:
        """Stop our side of a session; True when there was one."""
        with self._lock:
            session = self._sessions.pop((base_url, stream), None)
        if session is not None:
            session.stop()
        return session is not None

    def forget_stream(self, stream: str) -> None:
        """Stop every session on ``stream``, whatever service it was opened against."""
        with self._lock:
            keys = [k for k in self._sessions if k[1] == stream]
            sessions = [self._sessions.pop(k) for k in keys]
        for session in sessions:
            session.stop()

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.stop()
