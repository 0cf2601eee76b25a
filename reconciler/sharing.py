"""Replicas that share the fleet through etcd (``reconciler run --state etcd://... --replica``).

Each replica holds one lease (``state.leases.Replica``) and, bound to it, a presence key
(``replica:<name>``) and the shares it works: one per Host (every resource belongs to the
Host its references lead to, ``Registry.root_of``) and ``fleet`` for the Host-less work (the
source's record, a resource whose chain is broken). Who should hold a share is computed
(``assign``: rendezvous hashing under an even load) from the shares and the replicas present:
every replica computes the same answer, a replica joining takes about 1/N of the shares, one
leaving gives its shares to the others, and nobody negotiates. A replica claims what it
should hold when nobody holds it (create-if-absent, so two never hold one) and lets go what
another should hold now.

A replica that dies stops renewing; its lease, and every share on it, is gone within the TTL,
and the next rebalance of the others (every TTL / 3) claims them and re-checks everything:
what runs is adopted by its labels (same instance and owner ID), a run's job is followed
again. Fencing: every record write carries the share's holder key compared with the
replica's lease, every event the presence key's, so etcd refuses a woken replica's write;
every Docker call first asks :meth:`Sharing.fence` (no call once the lease may have expired,
none for a pass, or a run a pass started, whose share it no longer holds). Without quorum
nothing can be renewed or written: the lease runs out, the replica stops acting and says why;
it joins again with a new lease when the cluster answers.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog
import tenacity

from controllers.errors import TemporaryError
from state.errors import StateError
from state.etcdgw import Compare
from state.etcdlock import REPLICAS
from state.etcdlock import SHARE as WRITER
from state.etcdstore import EtcdStore
from state.keys import Key
from state.leases import Replica, holders

FLEET = "fleet"
ACTING: contextvars.ContextVar[str | None] = contextvars.ContextVar("acting", default=None)
"""The share the running pass (or the run it started) works for."""
MEMBER = REPLICAS  # a replica's presence key: holders/replica:<name>
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
DEFAULT_TTL_S = 15
log = structlog.get_logger("reconciler.sharing")


class NotHeld(TemporaryError):
    """A Docker call refused before it was made: this replica does not hold its share."""


def assign(shares: set[str], members: list[str]) -> dict[str, str]:
    """Who should hold each share: every replica computes the same answer from the same
    shares and members. Each share, in name order, goes to the member that ranks highest for
    it (rendezvous hashing) among those still under the even load, ceil(shares / members):
    with a handful of Hosts, pure rendezvous left one replica of three idle and another
    holding three. The price: a member's arrival or departure may move more shares than
    the fewest possible (a takeover adopts what runs, so a move costs a pass, not a
    restart)."""
    if not members:
        return {}
    cap = -(-len(shares) // len(members))
    load: dict[str, int] = dict.fromkeys(members, 0)
    chosen = {}
    for share in sorted(shares):
        ranked = sorted(members, reverse=True,
                        key=lambda m: hashlib.sha256(f"{share}\0{m}".encode()).digest())
        member = next(m for m in ranked if load[m] < cap)
        load[member] += 1
        chosen[share] = member
    return chosen


@dataclass(frozen=True)
class ReplicaView:
    """One replica as etcd shows it (``status --live``)."""

    name: str
    lease: int
    ttl_left_s: int
    shares: list[str]
    renewed_s_ago: int = 0  # the lease's age since its last renewal


class Sharing:
    """This replica's lease, its shares, and the fence of its writes and Docker calls."""

    def __init__(self, store: EtcdStore, name: str, ttl_s: int,
                 share_of: Callable[[Key], str], shares: Callable[[], set[str]],
                 gained: Callable[[], None], say: Callable[[str], None]) -> None:
        self.store, self.name, self.ttl_s = store, name, ttl_s
        self.share_of, self.shares, self.gained, self.say = share_of, shares, gained, say
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self.why_not: str | None = None  # why this replica acts on nothing now
        self.replica = self._join()
        store.guards = self._guards
        store.etcd_events.guards = self._alive
        # Only this replica writes the records of the shares it holds (every write fenced):
        # while it holds one, what it read or wrote of its records is what they are.
        store.cache.believe(lambda resource: self.mine(Key.parse(resource)))

    def _join(self) -> Replica:
        if not NAME_RE.fullmatch(self.name):
            raise StateError(f"replica name {self.name!r}: use 1-63 letters, digits, '.', "
                             "'_' and '-', starting with a letter or digit")
        replica = Replica(self.store.gateway, self.store.prefix, self.name, self.ttl_s)
        writer = self.store.gateway.get(replica.key(WRITER))
        if writer is not None:
            replica.close()
            raise StateError(f"a daemon or apply without --replica holds {self.store.where} "
                             f"({writer.value.decode(errors='replace')[:120]}): replicas "
                             "start once it ends")
        if not replica.claim(MEMBER + self.name):
            replica.close()
            raise StateError(f"replica name {self.name!r} is in use by a live replica of "
                             f"{self.store.where}: give each replica its own --replica")
        return replica

    # --- what is ours -----------------------------------------------------------------------

    def held(self) -> set[str]:
        with self._lock:
            return set() if self.replica.lost else set(self._held)

    def mine(self, key: Key) -> bool:
        """Whether this replica acts on ``key`` now."""
        return self.share_of(key) in self.held()

    @contextlib.contextmanager
    def acting(self, key: Key) -> Iterator[None]:
        """Docker calls in this block, and in work it starts in its context (an Experiment
        run on the board), are for ``key``'s share (``fence``)."""
        token = ACTING.set(self.share_of(key))
        try:
            yield
        finally:
            ACTING.reset(token)

    def fence(self, host: str) -> None:
        """Before a Docker call on ``host``: NotHeld unless the lease is live and (within a
        pass) the pass's share is still held."""
        if self.replica.lost:
            raise NotHeld(f"replica {self.name} lost its lease: no Docker call on Host {host} "
                          "until it holds a share again")
        share = ACTING.get()
        if share is not None and share not in self.held():
            raise NotHeld(f"replica {self.name} no longer holds {share}: no Docker call on "
                          f"Host {host}")

    def _guards(self, resource: str) -> list[Compare]:
        replica = self.replica
        replica.check()  # lost: StateFenced before anything is sent
        return [replica.fence(self.share_of(Key.parse(resource)))]

    def _alive(self) -> list[Compare]:
        replica = self.replica
        replica.check()
        return [replica.fence(MEMBER + self.name)]

    # --- rebalancing ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Rebalance every TTL / 3 until ``stop`` (a supervised daemon thread), once the
        replicas started alongside this one have joined (``_settle``)."""
        def pause(seconds: float) -> None:
            stop.wait(seconds)

        def once() -> bool:
            self._round()
            return stop.is_set()

        if not self._held:
            self._settle(pause)
        tenacity.Retrying(retry=tenacity.retry_if_result(lambda done: not done),
                          wait=tenacity.wait_fixed(self.ttl_s / 3), sleep=pause,
                          stop=tenacity.stop_never, retry_error_callback=lambda state: None,
                          )(once)

    def _settle(self, pause: Callable[[float], None]) -> None:
        """Before taking a first share, wait until the replicas present stay the same for one
        rebalance interval (at most one TTL). Replicas started together then agree on the
        first assignment: a replica that took every Host alone, a second before the others
        joined, started work (an Experiment run above all) that the next rebalance moved
        away and fenced."""
        interval = self.ttl_s / 3

        def members() -> list[str]:
            return sorted(h.share for h in self.replica.holders() if h.share.startswith(MEMBER))

        try:
            seen = [members()]

            def changed() -> bool:
                now = members()
                moved, seen[0] = now != seen[0], now
                return moved

            pause(interval)
            tenacity.Retrying(retry=tenacity.retry_if_result(bool),
                              wait=tenacity.wait_fixed(interval), sleep=pause,
                              stop=tenacity.stop_after_delay(self.ttl_s),
                              retry_error_callback=lambda state: None)(changed)
        except StateError as exc:  # the first round says why, and the lease decides
            log.info("replica.settle_skipped", replica=self.name, reason=str(exc))

    def _round(self) -> None:
        try:
            self.rebalance()
        except StateError as exc:  # no quorum, a member gone: the lease decides
            self._stalled(str(exc))

    def _stalled(self, why: str) -> None:
        if self.why_not != why:
            self.say(f"replica {self.name} acts on nothing: {why}")
            log.warning("replica.stalled", replica=self.name, reason=why)
        self.why_not = why

    def rebalance(self) -> None:
        """Claim the shares this replica should hold and nobody does; let go of those another
        replica should hold now. A lost lease is replaced (joined again) first."""
        if self.replica.lost:
            with self._lock:
                self._held.clear()
            old = self.replica
            self._stalled(f"its lease {old.lease:x} expired or went unrenewed for its TTL "
                          f"({self.ttl_s}s)")
            old.close(revoke=False)
            # Ours, and worthless now: revoked, so its keys (the name above all) go at once
            # rather than when etcd lets it expire (a new leader extends every lease).
            self.store.gateway.revoke(old.lease)
            self.replica = self._join()
        holders = self.replica.holders()
        members = sorted(h.share[len(MEMBER):] for h in holders if h.share.startswith(MEMBER))
        ours = {h.share for h in holders
                if h.lease == self.replica.lease and not h.share.startswith(MEMBER)}
        wanted = {s for s, m in assign(self.shares(), members).items() if m == self.name}
        for share in ours - wanted:
            self.replica.release(share)
        gained = {s for s in wanted - ours if self.replica.claim(s)}
        if gained:  # their last holder wrote them since this replica last did: read again
            self.store.cache.forget()
        with self._lock:
            self._held = (ours & wanted) | gained
        if self.why_not is not None:
            self.say(f"replica {self.name} acts again (lease {self.replica.lease:x})")
            self.why_not = None
        if gained:
            log.info("replica.gained", replica=self.name, shares=sorted(gained))
            self.gained()

    def describe(self) -> dict[str, object]:
        """For ``health`` and ``status --live`` of this daemon."""
        return {"name": self.name, "lease": f"{self.replica.lease:x}",
                "holds": sorted(self.held()), "actsOnNothing": self.why_not,
                "etcdWrites": self.store.gateway.writes}

    def close(self) -> None:
        """Let every share go now (a clean shutdown): the others take them at their next
        rebalance instead of after the TTL."""
        self.replica.close(revoke=True)


def replicas(store: EtcdStore) -> list[ReplicaView]:
    """Every replica present in ``store``'s namespace, its shares and lease time left."""
    held = holders(store.gateway, store.prefix)
    views = []
    for member in (h for h in held if h.share.startswith(MEMBER)):
        shares = sorted(h.share for h in held
                        if h.lease == member.lease and not h.share.startswith(MEMBER))
        left, granted = store.gateway.lease_times(member.lease)
        views.append(ReplicaView(member.share[len(MEMBER):], member.lease, left, shares,
                                 max(0, granted - left) if left >= 0 else granted))
    return sorted(views, key=lambda v: v.name)
