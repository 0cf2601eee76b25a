"""The test RTSP sources encode 4:2:0 and report their own death (issue 9, flaky suite).

Negotiated freely, x264 is fed 4:4:4 and encodes High 4:4:4 (profile_idc 244); a client that
wants baseline then kills gst-rtsp-server and every later test of the session timed out. These
tests read the SDP a real ``DESCRIBE`` returns, and kill a real server to see the next use of it
fail at once with its log.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controllers.waiting import until
from tests.emulators.rtsp_source import RtspSource, describe
from tests.emulators.vst_source import ColourSource
from tests.ports import free_port

PROFILE_RE = re.compile(rb"profile-level-id=([0-9A-Fa-f]{6})")
CHROMA_420_PROFILES = {66: "baseline", 77: "main", 88: "extended", 100: "high"}
"""H.264 profile_idc values whose pictures are 4:2:0, which every RTSP client decodes."""


def _profile_idc(port: int, mount: str) -> int:
    # Under load GStreamer answers 503 while it still prepares a mount's pipeline (seen with 4
    # test workers beside the quickstart's containers): ask again, as an RTSP client would.
    answer = until(lambda: a if (a := describe(port, mount)).startswith(b"RTSP/1.0 200")
                   else None, timeout_s=20, pace=0.5) or describe(port, mount)
    assert answer.startswith(b"RTSP/1.0 200"), answer[:200]
    found = PROFILE_RE.search(answer)
    assert found is not None, answer.decode(errors="replace")
    return int(found.group(1)[:2], 16)


def test_rtsp_source_encodes_420(tmp_path: Path) -> None:
    source = RtspSource(free_port(), {"red": ("FF0000", None), "framed": ("0000FF", "FFFF00")},
                        tmp_path / "rtsp.log")
    source.start()
    try:
        for mount in ("red", "framed"):
            assert _profile_idc(source.port, mount) in CHROMA_420_PROFILES, mount
    finally:
        source.stop()


def test_vst_colour_source_encodes_420() -> None:
    source = ColourSource({"red": (255, 0, 0)}).start()
    try:
        assert _profile_idc(source.port, "red") in CHROMA_420_PROFILES
    finally:
        source.stop()


def test_a_dead_rtsp_source_fails_its_next_use_with_its_log(tmp_path: Path) -> None:
    source = RtspSource(free_port(), {"red": ("FF0000", None)}, tmp_path / "rtsp.log")
    source.start()
    source.log.write_text("gst_rtsp_media_get_rates: assertion failed\n")  # what it last said
    assert source.process is not None
    source.process.kill()
    source.process.wait(timeout=10)
    with pytest.raises(AssertionError, match=r"died(.|\n)*get_rates: assertion failed"):
        source.url("red")
    with pytest.raises(AssertionError, match="died"):
        source.assert_serving()


def test_a_dead_colour_source_fails_its_next_use_with_its_log() -> None:
    source = ColourSource({"red": (255, 0, 0)}).start()
    assert source.process is not None
    source.process.kill()
    source.process.wait(timeout=10)
    try:
        with pytest.raises(AssertionError, match="died"):
            source.url("red")
    finally:
        source.stop()
