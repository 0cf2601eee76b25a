"""The daemon's work queue: which ``Kind/name`` key a worker reconciles next, and when.

Why it is shaped this way (DESIGN.md, "The reconcile contract"):

- Level-triggered reconciling makes an item a *key*, never an event: ten events for one key
  before a worker gets to it need one pass, so a key is at most once in the queue. Merging
  keeps the earliest due time and the most urgent priority, so a fixed spec (``add`` with
  CHANGE) never waits out a pending backoff and a periodic RESYNC never delays a queued change.
- One worker per key: two passes over one key would race on the same containers. A key added
  while it is being processed is only marked *dirty*; ``done`` puts it back, so the change is
  still seen, by a pass that starts after the one in flight.
- Bounded concurrency per kind (e.g. few Host probes at once) without head-of-line blocking:
  ``get`` skips a saturated kind and hands out the best key of any other kind. Ready keys are
  held in one heap per kind, so the choice costs O(kinds · log n), not a scan of the queue.
- CHANGE before RESYNC, then due time, then insertion order: after a restart thousands of
  resync items must not stand in front of a real change (no thundering herd ahead of it).
- Per-key exponential backoff with jitter and a cap, counted here because only the queue sees
  every retry of a key; ``forget`` resets it after a success.
- Time comes from an injectable monotonic ``clock`` (tests use a fake one); waiting uses a
  ``Condition`` with a timeout up to the next due time, never polling. Timeouts given to
  ``get``/``wait_idle`` are real seconds, so they still expire under a frozen fake clock.

Heaps are lazily cleaned: re-queuing a key pushes a new heap entry tagged with a fresh
generation and the old one is dropped when it surfaces (or when the heaps are rebuilt after
growing much larger than the queue). Standard library only; every public method is
thread-safe.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from state.keys import Key

__all__ = ["Priority", "QueueStats", "WorkQueue", "jittered", "kind_of"]

KIND_SEPARATOR = "/"
DEFAULT_KIND_LIMIT = 4
DEFAULT_BASE_BACKOFF_S = 0.5
DEFAULT_MAX_BACKOFF_S = 30.0  # a blocked service (a taken port) is tried within 30 s of its cure
DEFAULT_JITTER = 0.1
# 2**62 * any sane base already exceeds any sane cap; bounding the exponent keeps the float
# arithmetic finite however many times a key has failed.
MAX_BACKOFF_EXPONENT = 62
# Rebuild the heaps when stale entries outnumber live ones this much (plus a floor, so small
# queues never bother).
COMPACT_RATIO = 4
COMPACT_MIN_ENTRIES = 1024


class Priority(IntEnum):
    """Lower is more urgent."""

    CHANGE = 0  # a spec changed, a Docker event, a manual sync: goes first
    RESYNC = 1  # periodic resync


@dataclass(frozen=True)
class QueueStats:
    """``depth``: queued and due now (including keys held back by their kind's limit);
    ``processing``: handed out by ``get`` and not yet ``done``; ``delayed``: queued with a
    due time still ahead. A key added while processing counts only as processing.
    ``waiting``: callers blocked in ``get`` (idle workers)."""

    depth: int
    processing: int
    delayed: int
    waiting: int = 0


@dataclass(slots=True)
class _Entry:
    priority: Priority
    due: float
    seq: int  # insertion order, kept when the entry is merged with a later add
    gen: int  # matches the entry's live heap tuples; bumped whenever it changes


def kind_of(key: str) -> str:
    """``"Host/gpu-1"`` → ``"Host"`` (the part before the first ``/``)."""
    return key.partition(KIND_SEPARATOR)[0]


def jittered(interval_s: float, jitter: float, rng: random.Random) -> float:
    """``interval_s`` scaled by a uniform factor in ``[1 - jitter, 1 + jitter]``, never below 0.

    Spreads periodic work (resync) so that keys, or daemons, started together drift apart.
    """
    if jitter < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter}")
    return max(0.0, interval_s * (1.0 + rng.uniform(-jitter, jitter)))


class WorkQueue:
    """Deduplicating, prioritised, delayed work queue with one worker per key and per-kind
    concurrency limits. See the module docstring for the reasoning."""

    def __init__(self, *, kind_limits: Mapping[str, int] | None = None,
                 default_limit: int = DEFAULT_KIND_LIMIT,
                 base_backoff_s: float = DEFAULT_BASE_BACKOFF_S,
                 max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
                 jitter: float = DEFAULT_JITTER,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        limits = dict(kind_limits or {})
        for kind, limit in [*limits.items(), ("<default>", default_limit)]:
            if limit < 1:
                raise ValueError(f"concurrency limit for {kind} must be >= 1, got {limit}")
        if not base_backoff_s > 0:
            raise ValueError(f"base_backoff_s must be > 0, got {base_backoff_s}")
        if not max_backoff_s >= base_backoff_s:
            raise ValueError(f"max_backoff_s ({max_backoff_s}) must be >= base_backoff_s "
                             f"({base_backoff_s})")
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {jitter}")
        self._limits = limits
        self._default_limit = default_limit
        self._base_backoff_s = base_backoff_s
        self._max_backoff_s = max_backoff_s
        self._jitter = jitter
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        # One condition for everything: getters wait for work, wait_idle waits for quiet. With a
        # handful of workers notify_all costs nothing and cannot lose a wake-up to a getter
        # whose own timeout expired just as it was notified.
        self._cond = threading.Condition(threading.Lock())
        self._counter = itertools.count()
        self._queued: dict[Key, _Entry] = {}
        self._delayed: list[tuple[float, int, Key]] = []  # (due, gen, key), not yet promoted
        self._ready: dict[str, list[tuple[int, float, int, int, Key]]] = {}  # kind → heap
        self._heap_entries = 0
        self._processing: set[Key] = set()
        self._busy_per_kind: dict[str, int] = {}
        self._dirty: dict[Key, _Entry] = {}  # added while processing; re-queued by done()
        self._failures: dict[Key, int] = {}
        self._waiting = 0  # callers blocked in get()
        self._shut_down = False

    # --- public API --------------------------------------------------------------------------

    def add(self, key: Key, priority: Priority = Priority.CHANGE, delay_s: float = 0.0) -> None:
        """Queue ``key`` (due after ``delay_s``), merging with an entry already queued or
        pending behind the key's current pass. Ignored after ``shut_down``."""
        with self._cond:
            due = self._clock() + max(0.0, delay_s)
            self._enqueue(key, Priority(priority), due)

    def get(self, timeout: float | None = None) -> Key | None:
        """The most urgent ready key whose kind has a free slot, now marked processing.

        Blocks up to ``timeout`` real seconds (``None``: until there is one); returns ``None``
        on timeout and, at once, after ``shut_down``. The caller must call ``done(key)``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shut_down:
                    return None
                now = self._clock()
                self._promote(now)
                key = self._pop_ready()
                if key is not None:
                    self._processing.add(key)
                    kind = kind_of(key)
                    self._busy_per_kind[kind] = self._busy_per_kind.get(kind, 0) + 1
                    return key
                wait = self._next_due(now)
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._waiting += 1
                try:
                    self._cond.wait(None if wait is None else min(wait, threading.TIMEOUT_MAX))
                finally:
                    self._waiting -= 1

    def done(self, key: Key) -> None:
        """End the pass over ``key``; re-queue it if it was added (or retried) meanwhile.

        A key that is not processing is ignored: a stray ``done`` must not kill a worker.
        """
        with self._cond:
            if key not in self._processing:
                return
            self._processing.discard(key)
            kind = kind_of(key)
            busy = self._busy_per_kind[kind] - 1
            if busy:
                self._busy_per_kind[kind] = busy
            else:
                del self._busy_per_kind[kind]
            pending = self._dirty.pop(key, None)
            if pending is not None and not self._shut_down:
                self._enqueue(key, pending.priority, pending.due, seq=pending.seq)
            self._cond.notify_all()  # a slot of this kind is free, or the queue may be idle

    def retry(self, key: Key, within_s: float | None = None) -> float:
        """Count a failure of ``key`` and queue it (CHANGE) after the backoff; returns the delay.

        Delay: ``min(max, base * 2**(failures-1))``, jittered by ``±jitter`` and capped at
        max (or at ``within_s``, for a failure whose cure sends no event). An earlier entry for
        the key wins. Called during the key's pass (the usual case), the re-queue takes effect
        at ``done``.
        """
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            exponent = min(failures - 1, MAX_BACKOFF_EXPONENT)
            nominal = min(self._max_backoff_s, self._base_backoff_s * 2.0 ** exponent)
            delay = min(self._max_backoff_s, jittered(nominal, self._jitter, self._rng))
            if within_s:
                delay = min(delay, within_s)
            self._enqueue(key, Priority.CHANGE, self._clock() + delay)
            return delay

    def forget(self, key: Key) -> None:
        """Reset the failure count of ``key`` (after a successful pass). Leaves it queued."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Key) -> int:
        """How many times ``retry(key)`` was called since the last ``forget``."""
        with self._cond:
            return self._failures.get(key, 0)

    def stats(self) -> QueueStats:
        with self._cond:
            now = self._clock()
            delayed = sum(1 for entry in self._queued.values() if entry.due > now)
            return QueueStats(depth=len(self._queued) - delayed,
                              processing=len(self._processing), delayed=delayed,
                              waiting=self._waiting)

    def shut_down(self) -> None:
        """Stop handing out work: every ``get``, blocked or later, returns ``None`` at once.

        Keys in processing may still be ``done``; further adds and re-queues are dropped.
        """
        with self._cond:
            self._shut_down = True
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` real seconds until nothing is queued (delayed included) or
        processing; ``True`` if so. After ``shut_down`` queued keys are never handed out, so
        only processing keys count: that is the SIGTERM drain."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._is_idle():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, threading.TIMEOUT_MAX))
            return True

    # --- internals (caller holds the lock) ----------------------------------------------------

    def _is_idle(self) -> bool:
        return not self._processing and (self._shut_down or not self._queued)

    def _limit(self, kind: str) -> int:
        return self._limits.get(kind, self._default_limit)

    def _enqueue(self, key: Key, priority: Priority, due: float, seq: int | None = None) -> None:
        if self._shut_down:
            return
        if key in self._processing:
            pending = self._dirty.get(key)
            if pending is None:
                self._dirty[key] = _Entry(priority, due, next(self._counter), 0)
            else:
                pending.priority = min(pending.priority, priority)
                pending.due = min(pending.due, due)
            return
        entry = self._queued.get(key)
        if entry is None:
            entry = _Entry(priority, due, next(self._counter) if seq is None else seq, 0)
            self._queued[key] = entry
        elif priority < entry.priority or due < entry.due:
            entry.priority = min(entry.priority, priority)
            entry.due = min(entry.due, due)
        else:
            return  # the queued entry is already at least as urgent and as early
        entry.gen = next(self._counter)
        heapq.heappush(self._delayed, (entry.due, entry.gen, key))
        self._heap_entries += 1
        if self._heap_entries > COMPACT_RATIO * len(self._queued) + COMPACT_MIN_ENTRIES:
            self._compact()
        self._cond.notify_all()

    def _live(self, key: Key, gen: int) -> _Entry | None:
        entry = self._queued.get(key)
        return entry if entry is not None and entry.gen == gen else None

    def _promote(self, now: float) -> None:
        """Move entries that are due into their kind's ready heap; drop stale tuples."""
        while self._delayed and self._delayed[0][0] <= now:
            _, gen, key = heapq.heappop(self._delayed)
            entry = self._live(key, gen)
            if entry is None:
                self._heap_entries -= 1
                continue
            heap = self._ready.setdefault(kind_of(key), [])
            heapq.heappush(heap, (int(entry.priority), entry.due, entry.seq, gen, key))

    def _pop_ready(self) -> Key | None:
        best: tuple[int, float, int, int, Key] | None = None
        for kind, heap in list(self._ready.items()):
            while heap and self._live(heap[0][4], heap[0][3]) is None:
                heapq.heappop(heap)
                self._heap_entries -= 1
            if not heap:
                del self._ready[kind]
                continue
            if self._busy_per_kind.get(kind, 0) >= self._limit(kind):
                continue
            if best is None or heap[0] < best:
                best = heap[0]
        if best is None:
            return None
        key = best[4]
        heapq.heappop(self._ready[kind_of(key)])
        self._heap_entries -= 1
        del self._queued[key]
        return key

    def _next_due(self, now: float) -> float | None:
        """Seconds until the earliest live delayed entry is due (None: there is none)."""
        while self._delayed and self._live(self._delayed[0][2], self._delayed[0][1]) is None:
            heapq.heappop(self._delayed)
            self._heap_entries -= 1
        if not self._delayed:
            return None
        return max(0.0, self._delayed[0][0] - now)

    def _compact(self) -> None:
        """Rebuild the heaps from the live entries (everything goes back through promotion)."""
        self._delayed = [(entry.due, entry.gen, key) for key, entry in self._queued.items()]
        heapq.heapify(self._delayed)
        self._ready = {}
        self._heap_entries = len(self._delayed)
