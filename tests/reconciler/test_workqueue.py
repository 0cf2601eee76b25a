"""The work queue (reconciler/workqueue.py): dedup, one worker per key, per-kind limits,
priorities, backoff and shutdown. Timing goes through a fake clock so the tests are exact and
fast; one test runs real threads against the queue's invariants."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from controllers.waiting import until
from reconciler.workqueue import Priority, QueueStats, WorkQueue, jittered
from state.keys import Key

T0 = 1000.0
THREAD_JOIN_S = 5.0


class FakeClock:
    """A monotonic clock that only moves when a test says so; counts its reads."""

    def __init__(self, now: float = T0) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_queue(clock: FakeClock, **kwargs: object) -> WorkQueue:
    kwargs.setdefault("jitter", 0.0)
    return WorkQueue(clock=clock, **kwargs)  # type: ignore[arg-type]


def _blocked(queue: WorkQueue) -> None:
    """Wait until a getter is blocked in ``get`` (a readiness poll, not a guess at a sleep)."""
    assert until(lambda: True if queue.stats().waiting else None, timeout_s=THREAD_JOIN_S,
                 pace=0.001), "the getter never blocked"


def drain(queue: WorkQueue) -> list[str]:
    """Every key get() hands out right now, without marking any done."""
    keys: list[str] = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
    return keys


# --- dedup ------------------------------------------------------------------------------------


def test_adding_a_queued_key_keeps_one_entry(clock: FakeClock) -> None:
    queue = make_queue(clock)
    for _ in range(3):
        queue.add(Key("Deployment", "a"))
    queue.add(Key("Deployment", "b"))
    queue.add(Key("Deployment", "a"), Priority.RESYNC)
    assert queue.stats() == QueueStats(depth=2, processing=0, delayed=0)
    assert drain(queue) == ["Deployment/a", "Deployment/b"]


def test_merge_keeps_earliest_due_time(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "late-then-early"), delay_s=10)
    queue.add(Key("Deployment", "late-then-early"), delay_s=5)
    queue.add(Key("Deployment", "early-then-late"), delay_s=5)
    queue.add(Key("Deployment", "early-then-late"), delay_s=10)
    clock.now = T0 + 4.9
    assert queue.get(timeout=0) is None
    clock.now = T0 + 5
    assert sorted(drain(queue)) == ["Deployment/early-then-late", "Deployment/late-then-early"]


def test_merge_keeps_most_urgent_priority_and_resync_never_delays_a_change(
        clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "other"), Priority.RESYNC)
    queue.add(Key("Deployment", "changed"), Priority.CHANGE)
    queue.add(Key("Deployment", "changed"), Priority.RESYNC, delay_s=300)  # periodic resync tick
    # still due now and still a CHANGE: ahead of the older RESYNC item
    assert drain(queue) == ["Deployment/changed", "Deployment/other"]


def test_resync_then_change_upgrades_the_priority(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"), Priority.RESYNC)
    queue.add(Key("Deployment", "b"), Priority.RESYNC)
    queue.add(Key("Deployment", "b"), Priority.CHANGE)
    assert drain(queue) == ["Deployment/b", "Deployment/a"]


def test_merge_takes_priority_and_due_time_independently(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "first"), Priority.RESYNC)
    queue.add(Key("Deployment", "resync-now"), Priority.RESYNC)
    queue.add(Key("Deployment", "resync-now"), Priority.CHANGE, delay_s=10)  # → CHANGE, due now
    queue.add(Key("Deployment", "change-later"), Priority.CHANGE, delay_s=10)
    queue.add(Key("Deployment", "change-later"), Priority.RESYNC)  # → CHANGE, due now
    assert drain(queue) == ["Deployment/resync-now", "Deployment/change-later",
                            "Deployment/first"]


# --- one worker per key -----------------------------------------------------------------------


def test_a_key_in_processing_is_not_handed_out_again_and_done_requeues_it(
        clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"
    queue.add(Key("Deployment", "a"))
    queue.add(Key("Deployment", "a"), Priority.RESYNC)
    assert queue.get(timeout=0) is None
    assert queue.stats() == QueueStats(depth=0, processing=1, delayed=0)
    queue.done(Key("Deployment", "a"))
    assert queue.stats() == QueueStats(depth=1, processing=0, delayed=0)
    assert queue.get(timeout=0) == "Deployment/a"
    queue.done(Key("Deployment", "a"))
    assert queue.get(timeout=0) is None  # not dirty this time: no re-queue


def test_dirty_requeue_keeps_the_delay_of_the_add(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"
    queue.add(Key("Deployment", "a"), Priority.RESYNC, delay_s=30)
    queue.done(Key("Deployment", "a"))
    assert queue.stats() == QueueStats(depth=0, processing=0, delayed=1)
    clock.now = T0 + 29
    assert queue.get(timeout=0) is None
    clock.now = T0 + 30
    assert queue.get(timeout=0) == "Deployment/a"


def test_dirty_adds_merge_to_the_earliest_due_time(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"
    queue.add(Key("Deployment", "a"))
    queue.add(Key("Deployment", "a"), Priority.RESYNC, delay_s=30)
    queue.done(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"


def test_stray_done_is_ignored(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"))
    queue.done(Key("Deployment", "a"))  # queued, not processing
    queue.done(Key("Deployment", "never"))
    assert queue.stats() == QueueStats(depth=1, processing=0, delayed=0)


# --- bounded concurrency per kind -------------------------------------------------------------


def test_per_kind_limit_skips_a_saturated_kind_without_blocking_others(clock: FakeClock) -> None:
    queue = make_queue(clock, kind_limits={"Host": 2}, default_limit=3)
    for key in ("Host/a", "Host/b", "Host/c", "Deployment/x", "Deployment/y", "Deployment/z",
                "Deployment/w"):
        queue.add(Key.parse(key))
    assert drain(queue) == ["Host/a", "Host/b", "Deployment/x", "Deployment/y", "Deployment/z"]
    assert queue.stats() == QueueStats(depth=2, processing=5, delayed=0)
    queue.done(Key("Deployment", "y"))
    assert drain(queue) == ["Deployment/w"]
    queue.done(Key("Host", "b"))
    assert drain(queue) == ["Host/c"]


def test_done_wakes_a_getter_blocked_on_a_saturated_kind() -> None:
    queue = WorkQueue(kind_limits={"Host": 1})
    queue.add(Key("Host", "a"))
    queue.add(Key("Host", "b"))
    assert queue.get(timeout=0) == "Host/a"
    got: list[str | None] = []
    getter = threading.Thread(target=lambda: got.append(queue.get(timeout=THREAD_JOIN_S)),
                              daemon=True)
    getter.start()
    _blocked(queue)
    assert got == []  # blocked: Host is saturated
    started = time.monotonic()
    queue.done(Key("Host", "a"))
    getter.join(THREAD_JOIN_S)
    assert got == ["Host/b"]
    assert time.monotonic() - started < 1.0  # woken, not timed out


# --- order ------------------------------------------------------------------------------------


def test_change_goes_before_many_resync_items(clock: FakeClock) -> None:
    queue = make_queue(clock, default_limit=1000)
    resync = [Key("Deployment", f"r{i:03d}") for i in range(200)]
    for key in resync:
        queue.add(key, Priority.RESYNC)
    queue.add(Key("Deployment", "changed"), Priority.CHANGE)
    assert drain(queue) == ["Deployment/changed", *resync]


def test_ready_items_order_by_due_time_then_insertion(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "due-2"), delay_s=2)
    queue.add(Key("Deployment", "due-1"), delay_s=1)
    queue.add(Key("Deployment", "now-first"))
    queue.add(Key("Deployment", "now-second"))
    queue.add(Key("Deployment", "now-first"))  # re-adding keeps its place
    clock.now = T0 + 3
    assert drain(queue) == ["Deployment/now-first", "Deployment/now-second",
                            "Deployment/due-1", "Deployment/due-2"]


# --- delays and blocking ----------------------------------------------------------------------


def test_delayed_item_becomes_ready_at_its_due_time(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"), delay_s=5)
    assert queue.stats() == QueueStats(depth=0, processing=0, delayed=1)
    clock.now = T0 + 4.99
    assert queue.get(timeout=0) is None
    clock.now = T0 + 5
    assert queue.stats() == QueueStats(depth=1, processing=0, delayed=0)
    assert queue.get(timeout=0) == "Deployment/a"


def test_blocking_get_returns_a_delayed_item_when_due() -> None:
    queue = WorkQueue()
    queue.add(Key("Deployment", "a"), delay_s=0.15)
    started = time.monotonic()
    assert queue.get(timeout=THREAD_JOIN_S) == "Deployment/a"
    assert 0.14 <= time.monotonic() - started < 1.0


def test_blocking_get_waits_without_polling(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"), delay_s=3600)
    reads = clock.reads
    started = time.monotonic()
    assert queue.get(timeout=0.2) is None
    assert time.monotonic() - started >= 0.19
    assert clock.reads - reads <= 5  # a busy loop would read the clock thousands of times


def test_add_from_another_thread_wakes_a_blocked_get() -> None:
    queue = WorkQueue()
    got: list[str | None] = []
    getter = threading.Thread(target=lambda: got.append(queue.get(timeout=THREAD_JOIN_S)),
                              daemon=True)
    getter.start()
    _blocked(queue)
    started = time.monotonic()
    queue.add(Key("Deployment", "a"))
    getter.join(THREAD_JOIN_S)
    assert got == ["Deployment/a"]
    assert time.monotonic() - started < 1.0  # woken, not timed out


# --- retry and backoff ------------------------------------------------------------------------


def test_backoff_doubles_from_base_and_is_capped(clock: FakeClock) -> None:
    queue = make_queue(clock, base_backoff_s=0.5, max_backoff_s=60)
    delays = []
    for attempt in range(1, 11):
        delays.append(queue.retry(Key("Deployment", "a")))
        assert queue.failures(Key("Deployment", "a")) == attempt
    assert delays == [0.5, 1, 2, 4, 8, 16, 32, 60, 60, 60]
    for _ in range(2000):  # a huge failure count must not overflow
        queue.retry(Key("Deployment", "b"))
    assert queue.retry(Key("Deployment", "b")) == 60


def test_a_retry_may_ask_for_a_lower_ceiling(clock: FakeClock) -> None:
    """A failure whose cure sends no event (a port another process frees) is looked at again
    within seconds however many times it failed; the count still grows for the record."""
    queue = make_queue(clock, base_backoff_s=0.5, max_backoff_s=30)
    delays = [queue.retry(Key("Deployment", "a"), within_s=5.0) for _ in range(8)]
    assert delays == [0.5, 1, 2, 4, 5, 5, 5, 5]
    assert queue.failures(Key("Deployment", "a")) == 8
    assert queue.retry(Key("Deployment", "a")) == 30  # without it: the queue's own cap


def test_retry_queues_the_key_at_now_plus_delay_as_a_change(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "resync"), Priority.RESYNC)
    queue.retry(Key("Deployment", "a"))
    queue.retry(Key("Deployment", "a"))  # second failure: 1 s; the earlier 0.5 s entry wins
    clock.now = T0 + 0.49
    assert drain(queue) == ["Deployment/resync"]
    queue.done(Key("Deployment", "resync"))
    queue.add(Key("Deployment", "resync"), Priority.RESYNC)
    clock.now = T0 + 0.5
    assert drain(queue) == ["Deployment/a", "Deployment/resync"]


def test_jitter_stays_within_bounds_and_under_the_cap(clock: FakeClock) -> None:
    queue = make_queue(clock, base_backoff_s=0.5, max_backoff_s=10, jitter=0.1,
                       rng=random.Random(7))
    for failures in range(1, 8):
        nominal = min(10.0, 0.5 * 2 ** (failures - 1))
        samples = []
        for _ in range(100):
            queue.forget(Key("Deployment", "a"))
            for _ in range(failures - 1):
                queue.retry(Key("Deployment", "a"))
            samples.append(queue.retry(Key("Deployment", "a")))
        assert all(nominal * 0.9 <= d <= min(10.0, nominal * 1.1) for d in samples), samples
        assert min(samples) < nominal * 0.97  # jitter is really applied, both ways
        if nominal < 10:
            assert max(samples) > nominal * 1.03
        else:
            assert max(samples) == 10.0


def test_change_add_overrides_a_pending_retry_delay(clock: FakeClock) -> None:
    queue = make_queue(clock, base_backoff_s=30, max_backoff_s=60)
    queue.add(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"
    assert queue.retry(Key("Deployment", "a")) == 30
    assert queue.stats() == QueueStats(depth=0, processing=1, delayed=0)  # effective at done
    queue.done(Key("Deployment", "a"))
    assert queue.stats() == QueueStats(depth=0, processing=0, delayed=1)
    assert queue.get(timeout=0) is None
    queue.add(Key("Deployment", "a"), Priority.CHANGE)  # the spec was fixed
    assert queue.get(timeout=0) == "Deployment/a"


def test_change_add_during_processing_overrides_the_retry_at_done(clock: FakeClock) -> None:
    queue = make_queue(clock, base_backoff_s=30, max_backoff_s=60)
    queue.add(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"
    queue.retry(Key("Deployment", "a"))
    queue.add(Key("Deployment", "a"))
    queue.done(Key("Deployment", "a"))
    assert queue.get(timeout=0) == "Deployment/a"


def test_forget_resets_the_failure_count(clock: FakeClock) -> None:
    queue = make_queue(clock)
    for _ in range(4):
        queue.retry(Key("Deployment", "a"))
    queue.retry(Key("Deployment", "b"))
    assert queue.failures(Key("Deployment", "a")) == 4
    queue.forget(Key("Deployment", "a"))
    assert queue.failures(Key("Deployment", "a")) == 0
    assert queue.failures(Key("Deployment", "b")) == 1
    assert queue.retry(Key("Deployment", "a")) == 0.5


# --- shutdown, idle, stats --------------------------------------------------------------------


def test_shut_down_unblocks_a_blocked_get_and_stops_handing_out() -> None:
    queue = WorkQueue()
    got: list[str | None] = ["not returned"]
    getter = threading.Thread(
        target=lambda: got.__setitem__(0, queue.get(timeout=THREAD_JOIN_S)), daemon=True)
    getter.start()
    _blocked(queue)
    assert getter.is_alive()
    started = time.monotonic()
    queue.shut_down()
    getter.join(THREAD_JOIN_S)
    assert got == [None]
    assert time.monotonic() - started < 1.0
    queue.add(Key("Deployment", "a"))
    assert queue.get(timeout=THREAD_JOIN_S) is None
    assert queue.stats().depth == 0  # adds after shutdown are dropped


def test_shut_down_returns_none_even_with_ready_items(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"))
    queue.shut_down()
    assert queue.get(timeout=THREAD_JOIN_S) is None


def test_wait_idle(clock: FakeClock) -> None:
    queue = make_queue(clock)
    assert queue.wait_idle(0)
    queue.add(Key("Deployment", "a"), delay_s=10)
    assert not queue.wait_idle(0.02)  # a delayed item is still work
    clock.now = T0 + 10
    assert queue.get(timeout=0) == "Deployment/a"
    assert not queue.wait_idle(0.02)
    timer = threading.Timer(0.05, queue.done, args=("Deployment/a",))
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    assert queue.wait_idle(THREAD_JOIN_S)
    assert time.monotonic() - started < 1.0  # woken by done, not timed out


def test_wait_idle_after_shut_down_waits_only_for_processing(clock: FakeClock) -> None:
    queue = make_queue(clock)
    queue.add(Key("Deployment", "a"))
    queue.add(Key("Deployment", "b"))
    assert queue.get(timeout=0) == "Deployment/a"
    queue.shut_down()
    assert not queue.wait_idle(0.02)
    queue.done(Key("Deployment", "a"))
    assert queue.wait_idle(0)


def test_many_re_adds_keep_order_and_lose_nothing(clock: FakeClock) -> None:
    """Every earlier re-add leaves a stale heap entry behind; enough of them trigger rebuilds
    of the heaps, which must keep every key, the untouched ones too, once and in order."""
    queue = make_queue(clock, default_limit=100)
    quiet = [Key("Deployment", f"quiet-{i}") for i in range(5)]
    for key in quiet:
        queue.add(key, Priority.RESYNC, delay_s=10_000)
    busy = [Key("Deployment", n) for n in ("a", "b", "c")]
    for step in range(3000, 0, -1):
        for offset, key in enumerate(busy):
            queue.add(key, Priority.RESYNC, delay_s=step + offset)
    assert queue.stats() == QueueStats(depth=0, processing=0, delayed=8)
    clock.now = T0 + 3
    assert drain(queue) == busy
    clock.now = T0 + 10_000
    assert drain(queue) == quiet


def test_stats_counts_queued_processing_and_delayed(clock: FakeClock) -> None:
    queue = make_queue(clock)
    assert queue.stats() == QueueStats(depth=0, processing=0, delayed=0)
    queue.add(Key("Deployment", "a"))
    queue.add(Key("Deployment", "b"))
    queue.add(Key("Deployment", "c"))
    queue.add(Key("Deployment", "later"), delay_s=5)
    queue.retry(Key("Deployment", "retried"))
    assert queue.get(timeout=0) == "Deployment/a"
    assert queue.stats() == QueueStats(depth=2, processing=1, delayed=2)
    clock.now = T0 + 5
    assert queue.stats() == QueueStats(depth=4, processing=1, delayed=0)


def test_constructor_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="limit for Host must be >= 1"):
        WorkQueue(kind_limits={"Host": 0})
    with pytest.raises(ValueError, match="limit for <default> must be >= 1"):
        WorkQueue(default_limit=0)
    with pytest.raises(ValueError, match=r"max_backoff_s \(1\) must be >= base_backoff_s"):
        WorkQueue(base_backoff_s=10, max_backoff_s=1)
    with pytest.raises(ValueError, match=r"jitter must be within \[0, 1\]"):
        WorkQueue(jitter=1.5)


def test_jittered_helper() -> None:
    rng = random.Random(3)
    assert jittered(300, 0, rng) == 300
    samples = [jittered(300, 0.1, rng) for _ in range(500)]
    assert all(270 <= s <= 330 for s in samples)
    assert min(samples) < 280
    assert max(samples) > 320
    with pytest.raises(ValueError, match="jitter must be >= 0"):
        jittered(300, -0.1, rng)


# --- real threads -----------------------------------------------------------------------------

KIND_LIMITS = {"Host": 2, "Deployment": 3}
DEFAULT_LIMIT = 1
KINDS = ("Host", "Deployment", "Experiment")
NAMES_PER_KIND = 8
PRODUCERS = 6
ADDS_PER_PRODUCER = 400
WORKERS = 10


class _Ledger:
    """What the workers saw, under one lock: who works on what, and the versions read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.version: Counter[str] = Counter()  # bumped before each add: the "desired state"
        self.seen: dict[str, int] = {}  # highest version a pass read at its start
        self.active: set[str] = set()
        self.busy: Counter[str] = Counter()
        self.violations: list[str] = []
        self.passes = Counter[str]()

    def enter(self, key: str) -> None:
        kind = key.split("/", 1)[0]
        with self.lock:
            if key in self.active:
                self.violations.append(f"two workers on {key}")
            self.active.add(key)
            self.busy[kind] += 1
            if self.busy[kind] > KIND_LIMITS.get(kind, DEFAULT_LIMIT):
                self.violations.append(f"{self.busy[kind]} workers on kind {kind}")
            self.seen[key] = max(self.seen.get(key, 0), self.version[key])
            self.passes[key] += 1

    def leave(self, key: str) -> None:
        with self.lock:
            self.active.discard(key)
            self.busy[key.split("/", 1)[0]] -= 1


def test_many_threads_keep_the_invariants() -> None:
    """Workers process while producers add from many threads: never two workers on one key,
    never more than a kind's limit at once, and every key's last add is seen by a pass that
    read the key's version after it (the level-triggered guarantee)."""
    queue = WorkQueue(kind_limits=KIND_LIMITS, default_limit=DEFAULT_LIMIT,
                      base_backoff_s=0.001, max_backoff_s=0.005)
    keys = [Key(kind, f"n{i}") for kind in KINDS for i in range(NAMES_PER_KIND)]
    ledger = _Ledger()

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(ADDS_PER_PRODUCER):
            key = rng.choice(keys)
            with ledger.lock:
                ledger.version[key] += 1
            queue.add(key, rng.choice(list(Priority)), delay_s=rng.choice((0, 0, 0, 0.002)))
            if rng.random() < 0.3:
                time.sleep(0.0002)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while (key := queue.get()) is not None:
            ledger.enter(key)
            time.sleep(rng.uniform(0, 0.0005))
            ledger.leave(key)
            if rng.random() < 0.1:
                queue.retry(key)
            else:
                queue.forget(key)
            queue.done(key)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(WORKERS)]
    producers = [threading.Thread(target=producer, args=(100 + i,), daemon=True)
                 for i in range(PRODUCERS)]
    for thread in workers + producers:
        thread.start()
    for thread in producers:
        thread.join(THREAD_JOIN_S)
    assert queue.wait_idle(THREAD_JOIN_S), queue.stats()
    queue.shut_down()
    for thread in workers:
        thread.join(THREAD_JOIN_S)
    assert not any(thread.is_alive() for thread in workers + producers)
    assert ledger.violations == []
    assert {key: ledger.seen.get(key, 0) for key in ledger.version} == dict(ledger.version)
    assert sum(ledger.passes.values()) < PRODUCERS * ADDS_PER_PRODUCER  # dedup merged adds
