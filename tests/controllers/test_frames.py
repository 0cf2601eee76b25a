"""Frame probes against dead and silent loopback endpoints, and the frame analysis itself."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from controllers.kinds.streamset.frames import (
    BACKGROUND_NICE,
    HEIGHT,
    WIDTH,
    ProbeFailed,
    ProbeTimeout,
    ProbeUnavailable,
    analyse,
    probe,
    probe_many,
)
from controllers.waiting import until
from state.redaction import redact_urls
from tests.ports import free_port

SLACK_S = 1.5
SECRET = "s3cr3t-pw"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections (kernel backlog) and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])


def _frame(inside: tuple[int, int, int], edge: tuple[int, int, int], depth: int) -> bytes:
    rows = []
    for y in range(HEIGHT):
        for x in range(WIDTH):
            near_edge = min(x, y, WIDTH - 1 - x, HEIGHT - 1 - y) < depth
            rows.append(bytes(edge if near_edge else inside))
    return b"".join(rows)


def test_analyse_names_centre_and_border() -> None:
    framed = analyse(_frame((250, 130, 3), (126, 1, 129), 3), "rtsp://u:p@h/x", 0.5)
    assert framed.description == "ORANGE with a PURPLE border"
    assert framed.url == "rtsp://h/x"
    assert analyse(_frame((128, 128, 128), (128, 128, 128), 3), "rtsp://h/x", 0.5
                   ).description == "solid GRAY"


def test_dead_url_fails_fast_with_a_clear_message() -> None:
    url = f"rtsp://127.0.0.1:{free_port()}/stream"
    started = time.monotonic()
    with pytest.raises(ProbeFailed) as caught:
        probe(url, 5.0)
    assert time.monotonic() - started < 5.0 + SLACK_S
    assert str(caught.value).startswith(f"no frame from {url}: ")


def test_silent_server_times_out_and_ffmpeg_is_killed(silent_port: int) -> None:
    url = f"rtsp://viewer:{SECRET}@127.0.0.1:{silent_port}/stream"
    started = time.monotonic()
    with pytest.raises(ProbeTimeout) as caught:
        probe(url, 1.5)
    assert time.monotonic() - started < 1.5 + SLACK_S
    assert str(caught.value) == f"no frame from rtsp://127.0.0.1:{silent_port}/stream within 1.5 s"


def test_credentials_never_appear_in_errors(silent_port: int) -> None:
    dead = f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/a"
    silent = f"rtsp://admin:{SECRET}@127.0.0.1:{silent_port}/b"
    started = time.monotonic()
    results = probe_many([dead, silent, f"http://admin:{SECRET}@127.0.0.1/c"], 2.0)
    assert time.monotonic() - started < 2.0 + SLACK_S  # one shared deadline
    assert isinstance(results[dead], ProbeFailed)
    assert isinstance(results[silent], ProbeTimeout)
    assert isinstance(results[f"http://admin:{SECRET}@127.0.0.1/c"], ProbeUnavailable)
    for error in results.values():
        assert SECRET not in str(error)
        assert "admin" not in str(error)


def test_redact_strips_userinfo_everywhere() -> None:
    text = f"rtsp://a:{SECRET}@h:1/x failed; retry rtsps://b@h/y"
    assert redact_urls(text) == "rtsp://h:1/x failed; retry rtsps://h/y"


def _ffmpeg_children() -> dict[int, int]:
    """pid -> niceness of every ffmpeg this test process started (from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)
        except (OSError, ValueError):
            continue  # not a process, or one that just ended
        rest = fields[-1].split()
        if fields[0].endswith("(ffmpeg") and int(rest[1]) == os.getpid():
            found[int(entry.name)] = int(rest[16])
    return found


@pytest.mark.parametrize("background", [True, False])
def test_background_probes_run_at_lower_priority(silent_port: int, background: bool) -> None:
    """The frame watch's probes yield the CPU to passes and services; a pass's do not."""
    url = f"rtsp://127.0.0.1:{silent_port}/stream"
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(probe_many, [url], 1.0, background)
        children = until(lambda: _ffmpeg_children() or None, timeout_s=1.0, pace=0.01)
        assert pending.result()[url].__class__ is ProbeTimeout
    assert children is not None
    assert len(children) == 1
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert list(children.values()) == [BACKGROUND_NICE if background else own]
