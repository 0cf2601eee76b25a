"""Shares held through etcd leases, and the fence every guarded write carries (issue 28).

Why leases, as Kubernetes controllers do: a replica that dies, or is paused or cut off, must
lose what it holds without anyone deciding so, and a replica that wakes up after losing it
must change nothing. Each replica holds one lease; a share (a Host, or the Host-less work) is
a key ``<prefix>holders/<share>`` created only if absent and bound to that lease, so it goes
when the lease expires and another replica's claim can then succeed. Every write a replica
makes for a share carries :meth:`Replica.fence`, a comparison of that key's lease with its
own: a replica whose lease expired (a SIGSTOP past the TTL) has its write refused by etcd in
the same transaction, whatever its own clock believes.

Renewal runs on a thread every third of the TTL (tenacity paces it); a renewal that finds the
lease gone marks the replica ``lost`` at once, and so does a TTL passing with no renewal
answered, so the replica stops acting before its shares can be someone else's.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import tenacity

from state.errors import StateError, StateFenced
from state.etcdgw import Compare, Delete, EtcdGateway, Get, Op, Put, TxnResult

RENEW_SHARE = 3  # renew every TTL / 3
HOLDERS = "holders/"


@dataclass(frozen=True)
class Held:
    """Who holds a share, as etcd says."""

    share: str
    replica: str
    lease: int


def holders(gateway: EtcdGateway, prefix: str) -> list[Held]:
    """Every share held under ``prefix`` now, by whom (read by anyone, replica or not)."""
    start = f"{prefix}{HOLDERS}"
    return [Held(kv.key[len(start):], kv.value.decode(errors="replace"), kv.lease)
            for kv in gateway.scan(start)]


class Replica:
    """One replica's lease and the shares it holds under ``prefix``."""

    def __init__(self, gateway: EtcdGateway, prefix: str, name: str, ttl_s: int) -> None:
        self.gateway, self.prefix, self.name, self.ttl_s = gateway, prefix, name, ttl_s
        self.lease = gateway.grant(ttl_s).id
        self._renewed_at = time.monotonic()
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True,
                                        name=f"lease-{name}")
        self._thread.start()

    # --- holding ---------------------------------------------------------------------------

    def key(self, share: str) -> str:
        return f"{self.prefix}{HOLDERS}{share}"

    def claim(self, share: str) -> bool:
        """Hold ``share`` if nobody does (or this replica already does): True when it is
        ours after the call."""
        self.check()
        key = self.key(share)
        done = self.gateway.txn([Compare.absent(key)],
                                [Put(key, self.name.encode(), self.lease)], [Get(key)])
        if done.succeeded:
            return True
        (found,) = done.found
        return found is not None and found.lease == self.lease

    def release(self, share: str) -> None:
        """Let ``share`` go (a rebalance): only if it is still this replica's."""
        key = self.key(share)
        self.gateway.txn([self.fence(share)], [Delete(key)])

    def holders(self) -> list[Held]:
        """Every share held now, by whom."""
        return holders(self.gateway, self.prefix)

    def fence(self, share: str) -> Compare:
        """The condition every write for ``share`` carries: its holder key is bound to this
        replica's lease (so it exists, and is ours, when the write lands)."""
        return Compare(self.key(share), "LEASE", self.lease)

    def guarded(self, share: str, compare: list[Compare], success: list[Op]) -> TxnResult:
        """A write for ``share`` under its fence: :class:`StateFenced` when the fence fails
        (the share is another replica's now, or nobody's), else the transaction's result
        (``succeeded`` False: one of ``compare`` failed)."""
        self.check()
        fence = self.fence(share)
        done = self.gateway.txn([fence, *compare], success, [Get(fence.key)])
        if not done.succeeded:
            (holder,) = done.found
            if holder is None or holder.lease != self.lease:
                who = holder.value.decode(errors="replace") if holder else "nobody"
                raise StateFenced(f"replica {self.name} no longer holds {share} (held by "
                                  f"{who}): nothing was written")
        return done

    # --- the lease -------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once the lease may have expired: stop acting, hold nothing."""
        if time.monotonic() - self._renewed_at >= self.ttl_s:
            self._lost.set()
        return self._lost.is_set()

    def check(self) -> None:
        if self.lost:
            raise StateFenced(f"replica {self.name} lost its lease {self.lease:x}: it holds "
                              "nothing and writes nothing until it has a new one")

    def _renew(self) -> None:
        def once() -> bool | None:
            if self._stop.is_set() or self._lost.is_set():
                return True
            sent_at = time.monotonic()  # the lease's new TTL counts from no later than this
            with contextlib.suppress(StateError):  # unanswered: the TTL check decides
                if self.gateway.keepalive(self.lease) <= 0:
                    self._lost.set()
                    return True
                self._renewed_at = sent_at
            return None
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_result(lambda result: result is None),
            wait=tenacity.wait_fixed(self.ttl_s / RENEW_SHARE),
            sleep=self._pause, stop=tenacity.stop_never,
            retry_error_callback=lambda state: None)
        retrying(once)

    def _pause(self, seconds: float) -> None:
        self._stop.wait(seconds)  # close() cuts it short

    def close(self, revoke: bool = True) -> None:
        """Stop renewing; ``revoke`` lets every share go at once (a clean shutdown)."""
        self._stop.set()
        self._thread.join()
        if revoke and not self._lost.is_set():
            with contextlib.suppress(StateError):
                self.gateway.revoke(self.lease)

