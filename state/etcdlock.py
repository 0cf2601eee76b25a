"""The single-writer lock of an etcd namespace (``EtcdStore.lock``): ``state.lock`` in etcd.

The file store's lock is a ``flock``, gone the moment its process dies. Here it is the share
``writer`` held through a lease (``state.leases.Replica``): it goes when its holder stops
renewing, within the TTL, on any machine. A holder on this same machine whose process is gone
(``kill -9``, then a restart) is not waited for: its key names its host and PID, and the
lock is taken from it at once, in a transaction that compares its lease.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from types import TracebackType

from state.errors import LockHeld, StateError
from state.etcdgw import Compare, Delete, EtcdGateway, json_object
from state.leases import Replica
from state.lock import pid_alive
from state.models import utc_now

SHARE = "writer"
REPLICAS = "replica:"  # reconciler.sharing's presence keys
TTL_S = 10


class EtcdLock:
    """Exclusive, non-blocking; a context manager like ``state.lock.StateLock``."""

    def __init__(self, gateway: EtcdGateway, prefix: str, where: str, ttl_s: int = TTL_S
                 ) -> None:
        self.gateway, self.prefix, self.where, self.ttl_s = gateway, prefix, where, ttl_s
        self._replica: Replica | None = None

    @property
    def held(self) -> bool:
        return self._replica is not None and not self._replica.lost

    def acquire(self) -> None:
        """Take the lock or raise :class:`LockHeld` naming its holder."""
        if self._replica is not None:
            raise StateError(f"the lock of {self.where} is already held by this object")
        me = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": utc_now()})
        replica = Replica(self.gateway, self.prefix, me, self.ttl_s)
        try:
            if not replica.claim(SHARE) and not (self._take_from_dead(replica)
                                                 and replica.claim(SHARE)):
                holder = self.gateway.get(replica.key(SHARE))
                info = json_object(holder.value if holder else b"")
                raise LockHeld(Path(replica.key(SHARE)), _pid(info),
                               f"{info.get('since')} on {info.get('host')}")
            present = [h.share for h in replica.holders() if h.share.startswith(REPLICAS)]
            if present:
                raise StateError(
                    f"{len(present)} replica(s) share {self.where} "
                    f"({', '.join(p[len(REPLICAS):] for p in present)}): they reconcile what "
                    "its source holds; commit the change there, or stop them first")
        except BaseException:
            replica.close()
            raise
        self._replica = replica

    def _take_from_dead(self, replica: Replica) -> bool:
        """Delete the key of a holder that was this machine's and whose process is gone."""
        key = replica.key(SHARE)
        holder = self.gateway.get(key)
        if holder is None:
            return True
        info = json_object(holder.value)
        pid = _pid(info)
        if info.get("host") != socket.gethostname() or pid is None or pid_alive(pid):
            return False
        return self.gateway.txn([Compare(key, "LEASE", holder.lease)], [Delete(key)]).succeeded

    def release(self) -> None:
        replica, self._replica = self._replica, None
        if replica is not None:
            replica.close()  # revokes the lease: the key goes with it

    def __enter__(self) -> EtcdLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _pid(info: dict[str, object]) -> int | None:
    pid = info.get("pid")
    return pid if isinstance(pid, int) and pid > 0 else None
