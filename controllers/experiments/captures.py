"""Caption capture for experiments: every stream's request started together, read until done.

The spec's caption results carry no stream ID, so each stream gets its own streaming request
(bound to its stream ID) and its own connection; all of them are released by one barrier so
they start within milliseconds of each other, as the canary rule asks. Each reader keeps every
chunk (in the shape-independent form of ``controllers.caption_events``) until its ``enough``
says so, the window closes or the run is stopping; then it closes its connection and stops the
request on the service. A refused request (503, 4xx) or a broken stream is recorded, never
raised: it is evidence of failed work, not a crash of the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controllers.caption_events import CaptionChunk, chunks_of
from controllers.errors import ControllerError
from controllers.rtvi_client import RtviBusy, RtviClient, RtviRejected
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


@dataclass
class CaptureRun:
    captures: dict[str, Capture]
    active_peak: int


def capture(make_client: Callable[[], RtviClient], bodies: dict[str, dict[str, Any]],
            enough: Callable[[list[CaptionChunk]], bool], window_s: float, chunk_s: float,
            stop: threading.Event) -> CaptureRun:
    """Start every request in ``bodies`` (source → request body) together and read them."""
    captures = {src: Capture(src, str(body["id"])) for src, body in bodies.items()}
    barrier = threading.Barrier(len(bodies))
    lock = threading.Lock()
    active = [0, 0]  # now, peak
    deadline = [0.0]

    def read(src: str) -> None:
        cap = captures[src]
        client: RtviClient | None = None
        try:
            client = make_client()
            barrier.wait(START_TOGETHER_S)
            if not deadline[0]:
                deadline[0] = time.monotonic() + window_s
            events = client.caption_events(bodies[src], chunk_s + READ_MARGIN_S)
            try:
                for event in events:
                    if not cap.admitted:
                        cap.admitted = True
                        with lock:
                            active[0] += 1
                            active[1] = max(active)
                    for chunk in chunks_of(event):
                        cap.chunks.append(chunk)
                        cap.received.append(time.monotonic())
                    if enough(cap.chunks) or time.monotonic() >= deadline[0] or stop.is_set():
                        break
            finally:
                events.close()  # type: ignore[attr-defined]  # a generator
        except (RtviBusy, RtviRejected) as exc:
            cap.rejected = str(exc)
        except ControllerError as exc:
            if cap.admitted or cap.chunks:
                cap.broken = str(exc)
            else:
                cap.timed_out = True
                cap.broken = str(exc)
        except threading.BrokenBarrierError:
            cap.rejected = "not started: another reader failed to start"
        finally:
            if cap.admitted:
                with lock:
                    active[0] -= 1
            if client is not None:
                _stop_request(client, cap.stream_id)
                client.close()
            else:
                barrier.abort()  # the others must not wait for a reader that cannot start
    threads = [threading.Thread(target=read, args=(src,), name=f"capture-{src}", daemon=True)
               for src in bodies]
    for thread in threads:
        thread.start()
    # Stoppable: on shutdown the readers are abandoned (daemon threads; the restart finds the
    # run interrupted and cleans up), the run does not wait for their next chunk.
    until(lambda: True if not any(t.is_alive() for t in threads) else None,
          timeout_s=START_TOGETHER_S + window_s + chunk_s + READ_MARGIN_S + JOIN_MARGIN_S,
          pace=JOIN_POLL_S, stop=stop)
    if stop.is_set():
        raise Stopped("the reconciler is stopping")
    for cap in captures.values():
        if not cap.chunks and not cap.rejected and not cap.broken:
            cap.timed_out = True
    return CaptureRun(captures, active[1])


def _stop_request(client: RtviClient, stream_id: str) -> None:
    """Stop the request on the service too (closing the connection ends it at the next chunk;
    this ends it now). None active (400/404) is the normal case."""
    try:
        client.stop_captions(stream_id)
    except ControllerError:
        return
