"""The records a writer of an etcd namespace holds, kept in memory between its passes.

A pass reads its own record three or four times (plan, act, status) and its dependencies'
records too. On files that is the page cache; on etcd each read is a round trip to the
cluster, and a resync of a fleet's records cost its passes hundreds of them (a 3-replica resync
was slower than one replica's). Nobody else writes a record its writer holds: the lone daemon
or ``apply`` holds the namespace's lock, and a replica writes only the shares it holds, its
every write fenced by etcd itself (``state.leases``). So what this writer last read or wrote of
such a record is the record, and reading it again can be skipped.

When that stops being true the cache must stop being believed:
  - ``mine(resource)`` is asked at every lookup and every insert: a resource of a share this
    replica no longer holds (or of a lock whose lease is gone) is read from the cluster;
  - ``forget()`` when shares are gained: another replica may have written them meanwhile.
    Every read carries the epoch it started in, so a read begun before a ``forget`` cannot
    put what it saw back afterwards;
  - an entry is replaced only by what was seen at a revision at least as new, so a read that
    raced a write of the same record cannot put the older value back over the written one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from state.etcdgw import KeyValue


@dataclass(frozen=True)
class Seen:
    """What a key held (None: absent) at cluster revision ``revision``."""

    kv: KeyValue | None
    revision: int


class RecordCache:
    """Thread-safe. Off until ``believe`` says whose records are this writer's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Seen] = {}
        self._epoch = 0
        self._mine: Callable[[str], bool] | None = None
        self._asking = threading.local()
        self.hits = 0

    def believe(self, mine: Callable[[str], bool] | None) -> None:
        """Keep the records of resources for which ``mine`` says True (None: keep none)."""
        with self._lock:
            self._mine = mine
        self.forget()

    def forget(self) -> None:
        """Drop every entry; reads in flight may not put theirs back."""
        with self._lock:
            self._entries.clear()
            self._epoch += 1

    @property
    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def _believed(self, resource: str) -> bool:
        """Whether ``mine`` says so. Asking may itself read a record (a replica finds a
        pruned resource's share from its record): such a read, made while asking, is not
        believed, rather than asking again without end."""
        mine = self._mine
        if mine is None or getattr(self._asking, "now", False):
            return False
        self._asking.now = True
        try:
            return mine(resource)
        finally:
            self._asking.now = False

    def lookup(self, resource: str, key: str, ahead: bool = False) -> Seen | None:
        """What ``key`` (the record of ``resource``) holds, if known and still ours. A look
        ``ahead`` (what a prefetch need not read) is no read spared: not counted in ``hits``."""
        if not self._believed(resource):
            return None
        with self._lock:
            seen = self._entries.get(key)
            if seen is not None and not ahead:
                self.hits += 1
            return seen

    def saw(self, resource: str, key: str, seen: Seen, epoch: int) -> None:
        """A read (begun in ``epoch``) or a write found ``seen``."""
        if not self._believed(resource):
            return
        with self._lock:
            old = self._entries.get(key)
            if epoch == self._epoch and (old is None or seen.revision >= old.revision):
                self._entries[key] = seen

    def drop(self, key: str) -> None:
        """Forget one key (written by a path that does not say what it wrote)."""
        with self._lock:
            self._entries.pop(key, None)
