"""Every wait and poll in the controllers: tenacity, bounded by a deadline, ended by a stop.

A reconciler that ignores shutdown while it waits for a model to load (a readiness budget can
be half an hour) gets killed by ``docker stop``/systemd instead of stopping cleanly. So every
wait goes through ``until``: it polls a check at a given pace (fixed or backing off) until the
check answers, the time is up, or the stop event is set — then it raises ``Stopped`` at once.
What a pass had done by then is recorded write-ahead, so a restart adopts it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

from controllers.errors import TemporaryError

T = TypeVar("T")
Pace = float | tenacity.wait.wait_base


class Stopped(TemporaryError):
    """The reconciler is shutting down: the pass ends where it stands (resumed next run)."""


class StopWhenSet(tenacity.stop.stop_base):
    """tenacity stop condition: an event is set (the daemon is shutting down)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self.event.is_set()


class _WithinDeadline(tenacity.wait.wait_base):
    """The pace, but never past the deadline: the last check happens at the deadline."""

    def __init__(self, pace: tenacity.wait.wait_base, timeout_s: float) -> None:
        self.pace, self.timeout_s = pace, timeout_s

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        left = self.timeout_s - (retry_state.seconds_since_start or 0.0)
        return max(0.0, min(self.pace(retry_state), left))


def pause(stop: threading.Event | None, seconds: float) -> None:
    """Sleep ``seconds`` unless stopping: then raise Stopped at once."""
    if stop is None:
        time.sleep(seconds)
    elif stop.wait(seconds):
        raise Stopped("the reconciler is stopping")


def until(check: Callable[[], T | None], *, timeout_s: float, pace: Pace,
          stop: threading.Event | None = None,
          waiting: Callable[[float], None] | None = None) -> T | None:
    """Call ``check`` until it returns something other than None and return that; None once
    ``timeout_s`` has passed. ``pace``: seconds between checks, or a tenacity wait (e.g.
    ``wait_exponential``). ``waiting(elapsed_s)`` is called before each pause (progress).
    An exception from ``check`` ends the wait and propagates."""
    wait = tenacity.wait_fixed(pace) if isinstance(pace, int | float) else pace

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if waiting is not None:
            waiting(state.seconds_since_start or 0.0)
    stops: list[tenacity.stop.stop_base] = [tenacity.stop_after_delay(max(0.0, timeout_s))]
    if stop is not None:
        stops.append(StopWhenSet(stop))
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda result: result is None),
        stop=tenacity.stop_any(*stops), wait=_WithinDeadline(wait, timeout_s),
        sleep=lambda seconds: pause(stop, seconds), before_sleep=before_sleep,
        retry_error_callback=lambda state: None)
    result: T | None = retrying(check)
    if result is None and stop is not None and stop.is_set():
        raise Stopped("the reconciler is stopping")
    return result
