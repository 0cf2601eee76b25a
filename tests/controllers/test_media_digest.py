"""Pinned media is hashed once per version of the file, and again the moment it changes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from controllers.kinds.streamset.publisher.run import (
    MediaMismatch,
    PublishedSource,
    _sha256_of,
    check_media,
    media_sha256,
    publisher_request,
)
from controllers.ownership import LABEL_RUN_ID, LABEL_SOURCE
from controllers.waiting import until
from state.keys import Key
from state.models import Owner


def _pinned(path: Path) -> PublishedSource:
    return PublishedSource("clip", "file", file=path,
                           sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def test_an_unchanged_file_is_read_once(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(os.urandom(3 << 20))
    source = _pinned(clip)
    _sha256_of.cache_clear()
    for _ in range(5):
        check_media(source)
    info = _sha256_of.cache_info()
    assert (info.misses, info.hits) == (1, 4)


def test_new_content_is_hashed_again_even_with_the_old_size_and_mtime(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"a" * 4096)
    source = _pinned(clip)
    check_media(source)
    before = os.stat(clip)

    def rewritten() -> bool | None:  # same size, mtime put back as it was: only ctime moves
        clip.write_bytes(b"b" * 4096)  # (again, if the clock tick has not moved on yet)
        os.utime(clip, ns=(before.st_atime_ns, before.st_mtime_ns))
        return True if os.stat(clip).st_ctime_ns != before.st_ctime_ns else None
    assert until(rewritten, timeout_s=5, pace=0.001)
    with pytest.raises(MediaMismatch):
        check_media(source)
    assert media_sha256(clip) == hashlib.sha256(b"b" * 4096).hexdigest()


def test_a_file_replaced_by_another_is_hashed_again(tmp_path: Path) -> None:
    clip, other = tmp_path / "clip.mp4", tmp_path / "other.mp4"
    clip.write_bytes(b"first")
    assert media_sha256(clip) == hashlib.sha256(b"first").hexdigest()
    other.write_bytes(b"second")
    os.replace(other, clip)
    assert media_sha256(clip) == hashlib.sha256(b"second").hexdigest()


def test_an_experiments_publisher_carries_its_run_id_and_a_streamsets_none() -> None:
    source = PublishedSource("red", "colour", colour="RED")
    plain = publisher_request(Owner("t", ""), Key("StreamSet", "cams"), "h", source, "img")
    run = publisher_request(Owner("t", ""), Key("Experiment", "canary"), "h", source, "img",
                            run_id="canary-7")
    assert LABEL_RUN_ID not in plain.labels
    assert run.labels[LABEL_RUN_ID] == "canary-7"
    assert run.labels[LABEL_SOURCE] == "red"
