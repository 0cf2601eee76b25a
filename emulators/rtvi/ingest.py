"""Live-stream ingest: one real ``ffmpeg`` decoder per registered stream.

Why a subprocess per stream: the real service decodes every registered RTSP source itself, so a
source that is absent, late (VST publishes its URL after registration) or dropped must show in
what the captions say. ffmpeg scales each frame to 32x24 RGB24 at 2 fps on its stdout; a thread
reads whole frames and keeps the latest one, its arrival time, a frame count and a short history
of (time, description) pairs that caption chunks select from.

Why restart with capped exponential backoff: a real decoder retries a source that is not there
yet; a fixed fast loop would spin on a dead URL, an unbounded backoff would miss a source that
comes back. Backoff resets once a run has produced frames.

No orphans: ``stop()`` kills the process group leader and waits for it; the child also gets
``PR_SET_PDEATHSIG`` (SIGKILL) so that even a crash of the emulator (``os._exit``) cannot leave a
decoder behind. The death signal is tied to the thread that forked; that thread is this decoder's
own reader, which outlives its child by construction.

Secrets: a stream's credentials go into the URL given to ffmpeg's argv and nowhere else; nothing
here logs URLs.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from emulators.rtvi import colours

FFMPEG = "ffmpeg"
DECODE_FPS = 2
BACKOFF_START_S = 0.2
BACKOFF_CAP_S = 2.0
HISTORY_FRAMES = 64  # 32 s at 2 fps: more than any chunk the tests or defaults use
STOP_WAIT_S = 3.0
STALL_TIMEOUT_US = 5_000_000
"""A decoder whose source sends nothing for 5 s gives up and restarts: without it, an RTSP
session that stalls (its publisher restarted, the engine paused it) left a stream decoding
nothing forever, and its captions said "no new frame" while the source was back."""
STALL_FRAMES_S = 10.0
"""A decoder that produced no frame for this long is killed and restarted even while its
socket stays busy (a session that still talks but no longer delivers pictures)."""
_PR_SET_PDEATHSIG = 1


def ffmpeg_argv(url: str) -> list[str]:
    """The decoder command line (see the module docstring for why each option)."""
    return [
        FFMPEG,
        "-nostdin",
        "-loglevel",
        "error",
        "-rtsp_transport",
        "tcp",
        "-analyzeduration",
        "500000",
        "-probesize",
        "50000",
        "-timeout",  # a source that goes silent ends this run (then it restarts), never hangs it
        str(STALL_TIMEOUT_US),
        "-i",
        url,
        "-vf",
        f"fps={DECODE_FPS},scale={colours.FRAME_WIDTH}:{colours.FRAME_HEIGHT}",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "-",
    ]


def with_credentials(url: str, username: str | None, password: str | None) -> str:
    """Put user-info into an RTSP URL that has none (the real service's username/password)."""
    if not username:
        return url
    split = urllib.parse.urlsplit(url)
    if "@" in split.netloc:
        return url
    user = urllib.parse.quote(username, safe="")
    info = user if password is None else f"{user}:{urllib.parse.quote(password, safe='')}"
    return urllib.parse.urlunsplit(split._replace(netloc=f"{info}@{split.netloc}"))


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):  # not Linux, or no libc: stop() still kills
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class FrameInfo:
    """One decoded frame as captions see it."""

    at: float  # time.monotonic() when the chunker may see it: arrival + the ingest delay
    description: str  # colours.describe()
    stamped_unix: float = 0.0  # wall-clock time it arrived: the stamp media_info reports


@dataclass(frozen=True)
class IngestSnapshot:
    frame_count: int
    last_frame_at: float | None
    restarts: int
    running: bool
    last_description: str | None


class Decoder:
    """Keeps one ffmpeg decoding ``url`` until :meth:`stop`."""

    def __init__(self, url: str, name: str, delay_s: Callable[[], float] = lambda: 0.0) -> None:
        self._url = url
        self._delay_s = delay_s  # the ingest delay knob, read per frame
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._history: deque[FrameInfo] = deque(maxlen=HISTORY_FRAMES)
        self._latest: bytes | None = None
        self._frame_count = 0
        self._restarts = 0
        self._last_frame_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"ingest-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Kill the decoder and wait for it; idempotent."""
        self._stop.set()
        self._kill()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(STOP_WAIT_S)

    def _kill(self) -> None:
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    def snapshot(self) -> IngestSnapshot:
        with self._lock:
            last = self._history[-1] if self._history else None
            return IngestSnapshot(
                self._frame_count,
                None if last is None else last.at,
                self._restarts,
                self._process is not None and self._process.poll() is None,
                None if last is None else last.description,
            )

    def frames_between(self, start: float, end: float) -> list[FrameInfo]:
        """Frames that arrived in ``[start, end)`` (monotonic times)."""
        with self._lock:
            return [frame for frame in self._history if start <= frame.at < end]

    def latest_frame(self) -> bytes | None:
        with self._lock:
            return self._latest

    def _run(self) -> None:
        backoff = BACKOFF_START_S
        while not self._stop.is_set():
            produced = self._decode_once()
            if self._stop.is_set():
                break
            with self._lock:
                self._restarts += 1
            backoff = BACKOFF_START_S if produced else min(backoff * 2, BACKOFF_CAP_S)
            self._stop.wait(backoff)

    def _watch(self, process: subprocess.Popen[bytes], done: threading.Event) -> None:
        """Kill ``process`` when it has delivered no frame for STALL_FRAMES_S (the reader then
        sees its end and the decoder restarts)."""
        with self._lock:
            self._last_frame_at = time.monotonic()
        while not done.wait(1.0):
            with self._lock:
                silent = time.monotonic() - self._last_frame_at
            if silent > STALL_FRAMES_S:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                return

    def _decode_once(self) -> bool:
        """Run ffmpeg until it exits or we stop; True when it produced at least one frame."""
        try:
            process = subprocess.Popen(
                ffmpeg_argv(self._url),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # only prctl: safe between fork and exec
            )
        except OSError:
            return False
        with self._lock:
            self._process = process
        if self._stop.is_set():
            self._kill()
        produced = False
        assert process.stdout is not None
        done = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(process, done), daemon=True,
                                    name=f"{threading.current_thread().name}-watchdog")
        watchdog.start()
        try:
            while True:
                frame = _read_exact(process.stdout, colours.FRAME_BYTES)
                if frame is None:
                    break
                produced = True
                arrived = time.monotonic()
                info = FrameInfo(arrived + self._delay_s(), colours.describe(frame),
                                 time.time())
                with self._lock:
                    self._latest = frame
                    self._history.append(info)
                    self._frame_count += 1
                    self._last_frame_at = arrived
        finally:
            done.set()
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            process.wait()
            process.stdout.close()
            with self._lock:
                self._process = None
        return produced


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None at end of stream."""
    read = stream.read
    parts: list[bytes] = []
    remaining = size
    while remaining:
        part: bytes = read(remaining)
        if not part:
            return None
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)


def grab_file_frame(path: str, timeout_s: float = 20.0) -> bytes | None:
    """The first frame of a video or image file at analysis size, or None if undecodable."""
    argv = [
        FFMPEG,
        "-nostdin",
        "-loglevel",
        "error",
        "-i",
        path,
        "-frames:v",
        "1",
        "-vf",
        f"scale={colours.FRAME_WIDTH}:{colours.FRAME_HEIGHT}",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "-",
    ]
    try:
        result = subprocess.run(
            argv, capture_output=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    frame = result.stdout[: colours.FRAME_BYTES]
    return frame if len(frame) == colours.FRAME_BYTES else None
