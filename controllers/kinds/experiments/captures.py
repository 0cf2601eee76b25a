"""Caption capture for experiments: every stream's request started together, read until done.

The spec's caption results carry no stream ID, so each stream gets its own streaming request
(bound to its stream ID) and its own connection; all of them are released by one barrier so
they start within milliseconds of each other, as the canary rule asks. Each reader keeps every
chunk (in the shape-independent form of ``controllers.kinds.streamset.caption_events``) until its
``enough`` says so, the window closes or the run is stopping; then it closes its connection and
stops the request on the service. A refused request (503, 4xx) or a broken stream is recorded, never
raised: it is evidence of failed work, not a crash of the run.

A measured window (``fresh_s`` > 0) opens only once every stream has shown a decoded frame (or
has ended, or ``fresh_s`` has passed): a decoder still starting (RTSP set-up, the first
keyframe) is not the service under load, and on a busy host that start can take longer than a
short window. Chunks before the window opened are counted as warm-up, not measured, and the
window then runs its full length with every stream live. The VSS harness waits for freshness
the same way (for minutes, when it must).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from controllers.clients.rtvi_client import RtviBusy, RtviClient, RtviRejected
from controllers.errors import ControllerError
from controllers.kinds.streamset.caption_events import CaptionChunk, chunks_of
from controllers.waiting import Stopped, until

START_TOGETHER_S = 30.0  # how long the barrier waits for every reader to be ready
READ_MARGIN_S = 30.0  # past the chunk duration before a silent stream counts as timed out
JOIN_MARGIN_S = 10.0
JOIN_POLL_S = 0.2


@dataclass
class Capture:
    source: str
    stream_id: str
    chunks: list[CaptionChunk] = field(default_factory=list)
    received: list[float] = field(default_factory=list)  # monotonic arrival of each chunk
    admitted: bool = False
    rejected: str = ""
    broken: str = ""  # the connection failed after it was admitted
    timed_out: bool = False
    warmup: int = 0  # chunks that arrived before the window opened (not in ``chunks``)


@dataclass
class CaptureRun:
    captures: dict[str, Capture]
    active_peak: int
    fresh_wait_s: float = 0.0  # how long the window waited for every stream's first frame


def has_frames(chunks: list[CaptionChunk]) -> bool:
    """A chunk decoded from fresh frames has arrived."""
    return any((c.frame_count or 0) > 0 for c in chunks)


class _Window:
    """When the measured window opens and closes, shared by the readers (under ``lock``)."""

    def __init__(self, readers: int, window_s: float, fresh_s: float) -> None:
        self.lock = threading.Lock()
        self.readers, self.window_s, self.fresh_s = readers, window_s, fresh_s
        self.started = self.opened = self.deadline = 0.0
        self.settled: set[str] = set()  # readers that showed a frame or ended

    def start(self) -> None:
        with self.lock:
            if not self.started:
                self.started = time.monotonic()
                if self.fresh_s <= 0:
                    self._open()

    def read(self, src: str, chunks: list[CaptionChunk]) -> None:
        """A reader has read ``chunks`` so far: settled once one of them has frames."""
        self._settle(src, has_frames(chunks))

    def ended(self, src: str) -> None:
        """A reader ended (done, refused, broken): it must not hold the window shut."""
        self._settle(src, True)

    def _settle(self, src: str, settled: bool) -> None:
        with self.lock:
            if self.opened:
                return
            if settled:
                self.settled.add(src)
            if (len(self.settled) == self.readers
                    or time.monotonic() >= self.started + self.fresh_s):
                self._open()  # every stream live, or waited long enough: measure anyway

    def closed(self) -> bool:
        with self.lock:
            return bool(self.opened) and time.monotonic() >= self.deadline

    def _open(self) -> None:
        self.opened = time.monotonic()
        self.deadline = self.opened + self.window_s


class _Readers:
    """What the reader threads share: the barrier that starts them together, the admitted
    requests (now and the peak), the window, and when to stop reading."""

    def __init__(self, make_client: Callable[[], RtviClient], count: int,
                 enough: Callable[[list[CaptionChunk]], bool], window: _Window, chunk_s: float,
                 stop: threading.Event) -> None:
        self.make_client, self.enough, self.window = make_client, enough, window
        self.chunk_s, self.stop = chunk_s, stop
        self.barrier = threading.Barrier(count)
        self.lock = threading.Lock()
        self.active = [0, 0]  # now, peak

    def read(self, cap: Capture, body: dict[str, Any]) -> None:
        """One request, from the common start to enough chunks, the window's end or a stop;
        a refusal or a broken stream is recorded on ``cap``, never raised."""
        client: RtviClient | None = None
        try:
            client = self.make_client()
            self.barrier.wait(START_TOGETHER_S)
            self.window.start()
            self._consume(cap, client.caption_events(body, self.chunk_s + READ_MARGIN_S))
        except (RtviBusy, RtviRejected) as exc:
            cap.rejected = str(exc)
        except ControllerError as exc:
            cap.broken = str(exc)
            cap.timed_out = not (cap.admitted or cap.chunks)  # it never answered at all
        except threading.BrokenBarrierError:
            cap.rejected = "not started: another reader failed to start"
        finally:
            self._ended(cap, client)

    def _consume(self, cap: Capture, events: Iterator[dict[str, Any]]) -> None:
        try:
            for event in events:
                if not cap.admitted:
                    cap.admitted = True
                    with self.lock:
                        self.active[0] += 1
                        self.active[1] = max(self.active)
                received = time.time()
                for chunk in chunks_of(event):
                    cap.chunks.append(replace(chunk, received_unix=received))
                    cap.received.append(time.monotonic())
                self.window.read(cap.source, cap.chunks)
                if self.enough(cap.chunks) or self.window.closed() or self.stop.is_set():
                    break
        finally:
            events.close()  # type: ignore[attr-defined]  # a generator

    def _ended(self, cap: Capture, client: RtviClient | None) -> None:
        self.window.ended(cap.source)
        if cap.admitted:
            with self.lock:
                self.active[0] -= 1
        if client is not None:
            _stop_request(client, cap.stream_id)
            client.close()
        else:
            self.barrier.abort()  # the others must not wait for a reader that cannot start


def capture(make_client: Callable[[], RtviClient], bodies: dict[str, dict[str, Any]],
            enough: Callable[[list[CaptionChunk]], bool], window_s: float, chunk_s: float,
            stop: threading.Event, fresh_s: float = 0.0) -> CaptureRun:
    """Start every request in ``bodies`` (source → request body) together and read them for
    ``window_s``, which opens at once, or (``fresh_s`` > 0) once every stream has shown a
    frame, waiting at most ``fresh_s`` for that."""
    captures = {src: Capture(src, str(body["id"])) for src, body in bodies.items()}
    window = _Window(len(bodies), window_s, fresh_s)
    readers = _Readers(make_client, len(bodies), enough, window, chunk_s, stop)
    threads = [threading.Thread(target=readers.read, args=(captures[src], bodies[src]),
                                name=f"capture-{src}", daemon=True) for src in bodies]
    for thread in threads:
        thread.start()
    # Stoppable: on shutdown the readers are abandoned (daemon threads; the restart finds the
    # run interrupted and cleans up), the run does not wait for their next chunk.
    until(lambda: True if not any(t.is_alive() for t in threads) else None,
          timeout_s=(START_TOGETHER_S + fresh_s + window_s + chunk_s + READ_MARGIN_S
                     + JOIN_MARGIN_S),
          pace=JOIN_POLL_S, stop=stop)
    if stop.is_set():
        raise Stopped("the reconciler is stopping")
    for cap in captures.values():
        if window.opened:
            _drop_warmup(cap, window.opened)
        if not cap.chunks and not cap.rejected and not cap.broken:
            cap.timed_out = True
    return CaptureRun(captures, readers.active[1],
                      round(window.opened - window.started, 3) if window.opened else 0.0)


def _drop_warmup(cap: Capture, opened: float) -> None:
    """Chunks that arrived before the window opened are warm-up: counted, not measured."""
    cap.warmup = sum(1 for at in cap.received if at < opened)
    del cap.chunks[:cap.warmup], cap.received[:cap.warmup]


def _stop_request(client: RtviClient, stream_id: str) -> None:
    """Stop the request on the service too (closing the connection ends it at the next chunk;
    this ends it now). None active (400/404) is the normal case."""
    try:
        client.stop_captions(stream_id)
    except ControllerError:
        return
