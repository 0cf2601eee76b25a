"""controllers.waiting: the one way the controllers wait (tenacity, deadline, stop)."""

from __future__ import annotations

import threading
import time

import pytest
import tenacity

from controllers.waiting import Stopped, until


def test_until_returns_the_first_answer() -> None:
    answers = iter([None, None, "ready"])
    progress: list[float] = []
    assert until(lambda: next(answers), timeout_s=5, pace=0.001,
                 waiting=progress.append) == "ready"
    assert len(progress) == 2


def test_until_gives_none_at_the_deadline_and_checks_at_it() -> None:
    calls: list[float] = []
    started = time.monotonic()
    assert until(lambda: calls.append(time.monotonic()), timeout_s=0.2, pace=10.0) is None
    assert len(calls) == 2  # once at once, once at the deadline (the pace is capped by it)
    assert calls[-1] - started >= 0.2


def test_until_raises_stopped_as_soon_as_the_stop_is_set() -> None:
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        until(lambda: None, timeout_s=60, pace=30.0, stop=stop)
    assert time.monotonic() - started < 5  # not the 30 s pace, not the 60 s budget


def test_until_backs_off_with_a_tenacity_wait_and_lets_errors_through() -> None:
    seen: list[int] = []

    def check() -> str | None:
        seen.append(1)
        if len(seen) == 3:
            raise ValueError("broken")
        return None
    with pytest.raises(ValueError, match="broken"):
        until(check, timeout_s=5, pace=tenacity.wait_exponential(multiplier=0.001, max=0.01))
    assert len(seen) == 3
