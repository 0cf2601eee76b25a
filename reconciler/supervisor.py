"""Supervised daemon threads: a thread that dies is reported, restarted, and never a zombie.

A daemon whose source watcher died but whose ``health`` still says ok is the worst failure a
GitOps tool can have: commits are silently ignored. So every long-lived thread runs under a
supervisor. A death (an exception, or returning while the daemon runs) marks the thread
"restarting" — ``health`` fails — and it is restarted with exponential backoff (tenacity). A
thread that dies more than ``restarts`` times within ``window_s`` is beyond repair here: the
supervisor records why and sets the stop event, and the daemon exits non-zero so that the
supervisor outside (systemd, Docker) restarts the whole process. Deaths older than the window
are forgiven: a thread that fails once a day should not end the daemon after a week. A thread
that could not write while the state directory takes no writes has not died: it is held until
writes return (``state.diskhealth``), and no restart loop hides the one condition to report.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog
import tenacity

from controllers.waiting import Stopped, StopWhenSet, until
from state.diskhealth import DISK_ERRNOS, WRITES
from state.errors import StateError

THREAD_RESTARTS = 5
THREAD_RESTART_BASE_S = 1.0
THREAD_RESTART_MAX_S = 30.0
THREAD_DEATH_WINDOW_S = 600.0
WRITES_POLL_S = 0.5  # a parked thread looks this often whether the state directory is back
HELD = "held: the state directory takes no writes"
log = structlog.get_logger("reconciler.supervisor")


@dataclass(frozen=True)
class RestartPolicy:
    restarts: int = THREAD_RESTARTS
    base_s: float = THREAD_RESTART_BASE_S
    max_s: float = THREAD_RESTART_MAX_S
    window_s: float = THREAD_DEATH_WINDOW_S


class StopAfterRecentDeaths(tenacity.stop.stop_base):
    """tenacity stop condition: more than ``limit`` deaths within the last ``window_s``."""

    def __init__(self, limit: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self.deaths: deque[float] = deque()

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        outcome = retry_state.outcome
        died = outcome.exception() if outcome is not None else None
        if isinstance(died, ThreadDied) and died.disk:
            return False  # the state disk's fault, not the thread's: wait for it, forever
        now = self.clock()
        self.deaths.append(now)
        while self.deaths and self.deaths[0] < now - self.window_s:
            self.deaths.popleft()
        return len(self.deaths) > self.limit


class ThreadDied(Exception):
    """A supervised thread raised or returned while the daemon runs. ``disk``: it died of a
    full or read-only state disk, which no restart of the process would mend; such deaths
    never end the daemon (health fails meanwhile, and the thread is restarted with backoff)."""

    def __init__(self, why: str, disk: bool = False) -> None:
        super().__init__(why)
        self.disk = disk


class Supervisor:
    """Starts named threads and keeps their state for ``health`` and ``describe``."""

    def __init__(self, stop: threading.Event, policy: RestartPolicy,
                 on_death: Callable[[str, str], None]) -> None:
        self.stop = stop
        self.policy = policy
        self.on_death = on_death  # (thread name, why): record it somewhere a person looks
        self.states: dict[str, str] = {}  # "running", "restarting", "dead"
        self.deaths: dict[str, int] = {}  # over the daemon's life, for people and metrics
        self.fatal: str | None = None
        self.threads: list[threading.Thread] = []

    def spawn(self, name: str, target: Callable[[], None],
              forever: bool = True) -> threading.Thread:
        """Start ``target`` in a supervised thread. ``forever``: returning while the daemon
        still runs is a death too (a watcher that gave up is as dead as one that raised)."""
        thread = threading.Thread(target=self._supervise, args=(name, target, forever),
                                  name=name, daemon=True)
        self.states[name] = "running"
        thread.start()
        self.threads.append(thread)
        return thread

    def healthy(self) -> bool:
        """False while any thread is dead or waiting to be restarted, or the daemon is ending
        because one kept dying."""
        return self.fatal is None and all(state in ("running", HELD)
                                          for state in list(self.states.values()))

    def join(self, deadline: float) -> None:
        for thread in self.threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))

    def _supervise(self, name: str, target: Callable[[], None], forever: bool) -> None:
        retrying = tenacity.Retrying(
            stop=tenacity.stop_any(StopAfterRecentDeaths(self.policy.restarts,
                                                          self.policy.window_s),
                                   StopWhenSet(self.stop)),
            wait=tenacity.wait_exponential(multiplier=self.policy.base_s,
                                           max=self.policy.max_s),
            sleep=self._pause, retry=tenacity.retry_if_exception_type(ThreadDied),
            reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    self._run(name, target, forever)
        except ThreadDied as exc:
            if self.stop.is_set():
                return
            self.states[name] = "dead"
            self.fatal = f"thread {name} died {self.deaths.get(name, 0)} times; last: {exc}"
            log.error("daemon.fatal", thread=name, error=str(exc))
            self.stop.set()

    def _pause(self, seconds: float) -> None:
        """tenacity's sleep between restarts; ends early when the daemon stops."""
        self.stop.wait(seconds)

    def _run(self, name: str, target: Callable[[], None], forever: bool) -> None:
        while True:
            self.states[name] = "running"
            try:
                target()
            except Exception as exc:
                if self.stop.is_set():
                    return
                if self._held(exc):
                    if self._wait_for_writes(name):
                        continue  # not a death: the state directory took writes again
                    return
                log.exception("thread.died", thread=name)
                self._note_death(name, f"{type(exc).__name__}: {exc}")
                cause = exc if isinstance(exc, OSError) else exc.__cause__
                disk = isinstance(cause, OSError) and cause.errno in DISK_ERRNOS
                raise ThreadDied(f"{type(exc).__name__}: {exc}", disk=disk) from exc
            break
        if forever and not self.stop.is_set():
            self._note_death(name, "returned while the daemon runs")
            raise ThreadDied("returned while the daemon runs")
        if not forever:
            self.states.pop(name, None)  # done with its work (e.g. its Host is gone)

    @staticmethod
    def _held(exc: Exception) -> bool:
        """A thread that could not record something while the state directory takes no
        writes has not died: nothing is wrong with it, and nothing it did is lost (what it
        meant to record is looked at again when writes return)."""
        return WRITES.failing is not None and isinstance(exc, OSError | StateError)

    def _wait_for_writes(self, name: str) -> bool:
        """Park ``name`` until the state directory takes writes (True) or the daemon stops.
        The condition is the daemon's to report, once (``health``, the log): no death, no
        traceback, no restart loop, however long the spell lasts."""
        self.states[name] = HELD
        try:
            until(lambda: True if WRITES.failing is None else None, timeout_s=math.inf,
                  pace=WRITES_POLL_S, stop=self.stop)
        except Stopped:
            return False
        return True

    def _note_death(self, name: str, why: str) -> None:
        self.states[name] = "restarting"
        self.deaths[name] = self.deaths.get(name, 0) + 1
        try:  # best effort: a full disk may be why the thread died
            self.on_death(name, why)
        except Exception:
            log.exception("thread.death_unrecorded", thread=name)
