"""When a measured window opens: once every stream has shown a decoded frame or ended, or the
freshness wait ran out; chunks before that are warm-up. Pure: the readers' news is given by
hand (the end-to-end proof is tests/e2e/test_experiment.py, with a slow decoder)."""

from __future__ import annotations

from controllers.kinds.experiments.captures import Capture, _drop_warmup, _Window
from controllers.kinds.streamset.caption_events import CaptionChunk

NO_FRAME = CaptionChunk("No new frame.", chunk_id=0, frame_count=0)
FRAMED = CaptionChunk("A red frame.", chunk_id=1, frame_count=2)


def test_the_window_waits_for_every_stream_to_show_a_frame_or_end() -> None:
    window = _Window(3, window_s=600, fresh_s=600)
    window.start()
    window.read("a", [NO_FRAME])
    window.read("a", [NO_FRAME, FRAMED])
    window.read("b", [FRAMED])
    assert not window.opened
    assert not window.closed()
    window.ended("c")  # ended (refused, broken): it must not hold the window shut
    assert window.opened
    assert window.deadline == window.opened + 600
    assert not window.closed()


def test_without_a_freshness_wait_the_window_opens_at_the_start() -> None:
    window = _Window(2, window_s=0, fresh_s=0)
    window.start()
    assert window.opened
    assert window.closed()


def test_a_stream_with_no_frame_by_the_end_of_the_wait_is_measured_anyway() -> None:
    window = _Window(2, window_s=600, fresh_s=1e-9)
    window.start()
    window.read("a", [NO_FRAME])  # the wait is over: open, b is judged by its window
    assert window.opened
    assert "b" not in window.settled


def test_chunks_before_the_window_opened_are_warm_up() -> None:
    cap = Capture("a", "sid", chunks=[NO_FRAME, FRAMED, FRAMED], received=[1.0, 2.0, 3.0])
    _drop_warmup(cap, 2.5)
    assert (cap.warmup, cap.chunks, cap.received) == (2, [FRAMED], [3.0])
