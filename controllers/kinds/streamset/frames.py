"""Grab one decoded frame of an RTSP source and say what colour it shows.

Why: a published source is only proven when a real decoder sees the colour we asked for (and a
StreamSet's isolation checks need to know which source is which). One tiny frame is enough:
ffmpeg scales it to 32x24 RGB, we average the centre and the outermost ring of pixels and name
the nearest palette colours ("solid RED", "RED with a BLUE border").

Why an ffmpeg subprocess: it is the decoder the field guides use, it is killable on a deadline
(a stalled RTSP server cannot hang a worker thread), and it keeps codecs out of our process.
``-skip_frame nokey`` makes the first decoded frame a key frame: a client that joins a shared
stream mid-GOP would otherwise get a smeared, wrongly coloured picture.

Errors (see ``controllers.errors``): ``ProbeFailed`` and ``ProbeTimeout`` are Temporary (the
source may come up); ``ProbeUnavailable`` is Permanent (no ffmpeg, or not an RTSP URL). Every
message names the URL without user:password.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from controllers.errors import ControllerError, PermanentError, TemporaryError
from controllers.kinds.streamset.colours import nearest
from state.redaction import redact_urls

WIDTH, HEIGHT = 32, 24
FRAME_BYTES = WIDTH * HEIGHT * 3
MAX_PARALLEL = max(4, 4 * (os.cpu_count() or 1))
"""ffmpeg probes running at once in this process, whoever asks: 16 passes each probing 16
sources would otherwise start 256 decoders and starve the services being probed."""
_SLOTS = threading.BoundedSemaphore(MAX_PARALLEL)
STDERR_LINES = 3
BACKGROUND_NICE = 10
"""Niceness of a background probe (the daemon's frame watch): it re-proves what is already
proven, so reconcile passes and the services on this machine come first when CPU is short."""

Mean = tuple[float, float, float]


class ProbeFailed(TemporaryError):
    """ffmpeg could not read a frame (refused, no such mount, not decodable yet)."""


class ProbeTimeout(ProbeFailed):
    """No frame within the time allowed; ffmpeg was killed."""


class ProbeSlotsBusy(ProbeTimeout):
    """Every probe slot of this process stayed busy: nothing was learnt about the source."""


class ProbeUnavailable(PermanentError):
    """Probing cannot work here: ffmpeg is missing or the URL is not rtsp://."""


@dataclass(frozen=True)
class FrameSample:
    """What one decoded frame showed. ``url`` is already redacted."""

    url: str
    centre: Mean
    border: Mean
    centre_name: str
    border_name: str
    centre_distance: float
    border_distance: float
    elapsed_s: float

    @property
    def description(self) -> str:
        if self.centre_name == self.border_name:
            return f"solid {self.centre_name}"
        return f"{self.centre_name} with a {self.border_name} border"



def _mean(pixels: list[tuple[int, int, int]]) -> Mean:
    count = len(pixels)
    return (sum(p[0] for p in pixels) / count, sum(p[1] for p in pixels) / count,
            sum(p[2] for p in pixels) / count)


def analyse(frame: bytes, url: str, elapsed_s: float) -> FrameSample:
    """Centre = the middle half in both directions; border = the outermost pixel ring (a border
    of 1/8 of the height is 3 pixels deep at 24 rows, so the ring never touches the inside)."""
    def pixel(x: int, y: int) -> tuple[int, int, int]:
        at = (y * WIDTH + x) * 3
        return frame[at], frame[at + 1], frame[at + 2]

    centre = _mean([pixel(x, y) for y in range(HEIGHT // 4, HEIGHT * 3 // 4)
                    for x in range(WIDTH // 4, WIDTH * 3 // 4)])
    ring = [pixel(x, y) for y in range(HEIGHT) for x in range(WIDTH)
            if x in (0, WIDTH - 1) or y in (0, HEIGHT - 1)]
    border = _mean(ring)
    centre_name, centre_distance = nearest(centre)
    border_name, border_distance = nearest(border)
    return FrameSample(redact_urls(url), centre, border, centre_name, border_name, centre_distance,
                       border_distance, elapsed_s)


def _command(url: str) -> list[str]:
    return ["ffmpeg", "-nostdin", "-loglevel", "error", "-rtsp_transport", "tcp",
            "-analyzeduration", "500000", "-probesize", "50000", "-skip_frame", "nokey",
            "-i", url, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24",
            "-s", f"{WIDTH}x{HEIGHT}", "-"]


def probe(url: str, timeout_s: float, background: bool = False) -> FrameSample:
    """Decode one frame of ``url`` within ``timeout_s`` seconds (at ``BACKGROUND_NICE`` if
    ``background``)."""
    shown = redact_urls(url)
    if urlsplit(url).scheme not in ("rtsp", "rtsps"):
        raise ProbeUnavailable(f"cannot probe {shown}: not an rtsp:// URL")
    if shutil.which("ffmpeg") is None:
        raise ProbeUnavailable(f"cannot probe {shown}: ffmpeg is not installed "
                               "(apt-get install -y ffmpeg)")
    if timeout_s <= 0:
        raise ProbeTimeout(f"no frame from {shown}: no time left to probe")
    started = time.monotonic()
    with subprocess.Popen(_command(url), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as child:
        if background:
            _lower_priority(child.pid)
        try:
            out, err = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise ProbeTimeout(f"no frame from {shown} within {timeout_s:.1f} s") from None
    elapsed = time.monotonic() - started
    if child.returncode != 0 or len(out) < FRAME_BYTES:
        detail = " | ".join(redact_urls(err.decode("utf-8", "replace")).strip().splitlines()
                            [-STDERR_LINES:]) or f"ffmpeg exited {child.returncode}, no frame"
        raise ProbeFailed(f"no frame from {shown}: {detail}")
    return analyse(out[:FRAME_BYTES], url, elapsed)


def _lower_priority(pid: int) -> None:
    """Renice a child just started (not ``preexec_fn``: it is unsafe in a threaded process).
    A child that already exited, or a system that refuses, leaves the probe as it is."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, BACKGROUND_NICE)


def probe_many(urls: list[str], timeout_s: float,
               background: bool = False) -> dict[str, FrameSample | ControllerError]:
    """Probe every URL in parallel within one shared deadline; each result is a sample or the
    error it raised (keyed by the URL as given)."""
    deadline = time.monotonic() + timeout_s

    def one(url: str) -> FrameSample | ControllerError:
        if not _SLOTS.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return ProbeSlotsBusy(f"not probed {redact_urls(url)}: all {MAX_PARALLEL} probe slots "
                                  f"stayed busy for {timeout_s:.1f} s")
        try:
            return probe(url, deadline - time.monotonic(), background)
        except ControllerError as exc:
            return exc
        finally:
            _SLOTS.release()

    if not urls:
        return {}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(urls)),
                            thread_name_prefix="frame-probe") as pool:
        return dict(zip(urls, pool.map(one, urls), strict=True))
