"""The event log as etcd keys (``EtcdStore``): ``<prefix><seq, 20 digits>``, one event each.

An append creates the next sequence number's key only if it is absent, in one transaction:
two processes appending at once never write the same number (the loser takes the next one),
and a reader in key order sees events in sequence order. The log keeps its newest
``KEEP`` events; older keys are deleted every ``TRIM_EVERY`` appends (the file log rotates
for the same reason). ``follow`` reads what came after the last event it yielded whenever
etcd's watch says the log changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator

from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random

from state.errors import StateError, StateFenced
from state.etcdgw import Compare, EtcdGateway, KeyValue, Put
from state.events import DEFAULT_POLL_S, EventType, Observed
from state.models import Event, utc_now
from state.redaction import Redactor

KEEP = 50_000
TRIM_EVERY = 1_000
WATCH_TICKS = 10  # with a watch, the periodic read is only a backstop
APPEND_ATTEMPTS = 16  # each lost race is another appender's success


class _Taken(StateError):
    """The next sequence number was taken by another appender."""


def _key(prefix: str, seq: int) -> str:
    return f"{prefix}{seq:020d}"


class EtcdEventLog(Observed):
    """``state.events.EventLog``'s ``append``/``read``/``follow`` on etcd; thread-safe."""

    def __init__(self, gateway: EtcdGateway, prefix: str, redactor: Redactor) -> None:
        super().__init__()
        self.gateway = gateway
        self.prefix = prefix
        self._redactor = redactor
        self._lock = threading.Lock()
        self._last: int | None = None
        self.guards: Callable[[], list[Compare]] = list
        """Comparisons every append carries (a replica's presence: a woken one writes no
        event)."""

    def _newest(self) -> int:
        found = self.gateway.scan(self.prefix, limit=1, newest_first=True)
        return int(found[0].key[len(self.prefix):]) if found else 0

    def append(self, resource: str, type: EventType, reason: str, message: str) -> Event:
        """Record one event (scrubbed) once a quorum has it, and return it."""
        scrub = self._redactor.scrub_text
        with self._lock:
            for attempt in Retrying(retry=retry_if_exception_type(_Taken),
                                    stop=stop_after_attempt(APPEND_ATTEMPTS),
                                    wait=wait_random(0, 0.02), reraise=True):
                with attempt:
                    seq = (self._newest() if self._last is None else self._last) + 1
                    event = Event(seq=seq, time=utc_now(), resource=scrub(resource), type=type,
                                  reason=scrub(reason), message=scrub(message))
                    key = _key(self.prefix, seq)
                    guards = self.guards()
                    done = self.gateway.txn([*guards, Compare.absent(key)],
                                            [Put(key, event.model_dump_json().encode())])
                    if not done.succeeded:
                        fenced(self.gateway, guards, "an event")
                        self._last = None  # read the newest again
                        raise _Taken(f"event {seq} was appended by another writer")
            self._last = event.seq
        if event.seq % TRIM_EVERY == 0 and event.seq > KEEP:
            self.gateway.delete_below(self.prefix, _key(self.prefix, event.seq - KEEP + 1))
        return self.told(event)

    def read(self, resource: str | None = None, since_seq: int = 0, limit: int | None = None
             ) -> list[Event]:
        """``EventLog.read``: events after ``since_seq`` (of ``resource``), oldest first; with
        ``limit``, the newest ``limit`` of them."""
        if limit is not None and limit <= 0:
            return []
        after = _key(self.prefix, since_seq) if since_seq else None
        events = [e for kv in self.gateway.scan(self.prefix, after=after)
                  if (e := _parse(kv)) is not None
                  and (resource is None or e.resource == resource)]
        return events[-limit:] if limit is not None else events

    def follow(self, resource: str | None = None, since_seq: int = 0,
               poll_s: float = DEFAULT_POLL_S) -> Generator[Event, None, None]:
        """``EventLog.follow``: what is there, then what comes, forever. Woken by etcd's watch
        on the log's keys as an event is appended (from the revision of the last read, so
        nothing appended in between is missed), and reads again at least every ``poll_s``
        times ``WATCH_TICKS`` (a member that went away mid-watch is left for another)."""
        last = since_seq
        while True:
            revision = self.gateway.revision()
            for event in self.read(None, last):
                last = event.seq
                if resource is None or event.resource == resource:
                    yield event
            began = time.monotonic()
            if not self.gateway.changed(self.prefix, revision, poll_s * WATCH_TICKS):
                # A watch that ended at once (a member going away, a proxy) is no reason to
                # read again at once: the next read waits out the poll.
                time.sleep(max(0.0, poll_s - (time.monotonic() - began)))


def fenced(gateway: EtcdGateway, guards: list[Compare], what: str) -> None:
    """After a transaction failed: StateFenced when its ``guards`` alone fail (the writer no
    longer holds what they compare), so the caller does not mistake it for a lost race."""
    if guards and not gateway.txn(guards, []).succeeded:
        raise StateFenced(f"{what} was not written: this replica no longer holds the lease "
                          "its write is guarded by")


def _parse(kv: KeyValue) -> Event | None:
    try:
        return Event.model_validate_json(kv.value)
    except (ValidationError, ValueError):
        return None  # not one of ours: skipped, as the file log skips a torn line
