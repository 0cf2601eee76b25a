"""The store's records in etcd (``--state etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]``).

A reconciler whose records live in one state directory dies with its machine: nothing can read
its status, and no other machine can take over. ``EtcdStore`` keeps the same records (status
with its write-ahead inventory, the history of deleted resources, the event log, the instance
and its owner ID, the ``Source/specs`` record) as keys of a cluster, under::

    /rtvi-reconciler/<namespace>/resources/<Kind>/<name>.json   ResourceStatus
    /rtvi-reconciler/<namespace>/history/<Kind>/<name>.json     a deleted resource's history
    /rtvi-reconciler/<namespace>/quarantine/<Kind>/<name>.json.corrupt-<time>
    /rtvi-reconciler/<namespace>/events/<seq, 20 digits>        one event each
    /rtvi-reconciler/<namespace>/instance                       instance name and owner ID
    /rtvi-reconciler/<namespace>/holders/<share>                who holds what (state.leases)

The guarantees are the file store's, by other means: a save is one write, acknowledged by a
quorum before it returns, so ``kill -9`` loses nothing written; a read-modify-write is a
transaction that compares the record's revision, so two writers never lose each other's
change (the loser reads again and redoes its change); a delete moves the history in the same
transaction. What stays on the local state directory: the structured log, the control socket,
evidence bundles (under ``evidenceRoot``), the SSH runtime folder.

Keys are paths-like, so a record that does not parse is a ``CorruptState`` naming its key the
way the file store names its file (the daemon files the warning under the key's resource and
moves the record aside). Every write can carry ``guards`` (``state.leases.Replica.fence``): a
replica that lost its lease has its write refused by etcd itself.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random

from state import etcdbundles
from state.errors import CorruptState, StateError
from state.etcdcache import RecordCache, Seen
from state.etcdevents import EtcdEventLog, fenced
from state.etcdgw import Compare, Delete, EtcdGateway, Get, KeyValue, Op, Put
from state.etcdlock import EtcdLock
from state.keys import KIND_RE, Key
from state.models import HISTORY_LIMIT, HistoryEntry, Owner, ResourceStatus, utc_now
from state.redaction import DEFAULT_REDACTOR, Redactor
from state.store import (
    DEFAULT_INSTANCE,
    HISTORY_DIR,
    INSTANCE_RE,
    MAX_STATUS_BYTES,
    RESOURCES_DIR,
    STATUS_SUFFIX,
    Store,
    key_of_record,
    split_resource,
)

SCHEME = "etcd://"
ROOT = "/rtvi-reconciler/"
QUARANTINE_DIR = "quarantine"
NAMESPACE_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
CAS_ATTEMPTS = 8  # another writer of the same record, again and again: a bug, not a race
TXN_OPS = 128  # etcd's default --max-txn-ops: the most reads one prefetch request carries


class Conflict(StateError):
    """The record changed between this writer's read and its write: read again, redo."""


def parse_url(url: str) -> tuple[list[str], str]:
    """(HTTP endpoints, namespace) of ``etcd://h:p[,h:p...][/namespace]``; StateError naming
    what is wrong. Loopback or not is the operator's choice; plain HTTP (the v3 gateway)."""
    if not url.startswith(SCHEME):
        raise StateError(f"--state {url!r}: expected files (the default) or "
                         "etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]")
    hosts, _, namespace = url[len(SCHEME):].partition("/")
    namespace = namespace.strip("/") or DEFAULT_INSTANCE
    if not NAMESPACE_RE.match(namespace):
        raise StateError(f"--state {url!r}: namespace {namespace!r} must be 1-63 lowercase "
                         "letters, digits and '-'")
    endpoints = []
    for item in hosts.split(","):
        try:
            parts = urlsplit(f"http://{item}")
            port = parts.port
        except ValueError as exc:
            raise StateError(f"--state {url!r}: {item!r} is not HOST:PORT ({exc})") from None
        if not parts.hostname or port is None or parts.username or parts.path or (
                parts.query or parts.fragment):
            raise StateError(f"--state {url!r}: {item!r} is not HOST:PORT")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        endpoints.append(f"http://{host}:{port}")
    return endpoints, namespace


class EtcdStore(Store):
    """``Store`` whose records are etcd keys; ``root`` is still the local state directory
    (logs, control socket, evidence, SSH runtime)."""

    def __init__(self, root: Path, gateway: EtcdGateway, namespace: str = DEFAULT_INSTANCE,
                 redactor: Redactor = DEFAULT_REDACTOR) -> None:
        super().__init__(root, redactor)
        self.gateway = gateway
        self.prefix = f"{ROOT}{namespace}/"
        self.where = f"etcd {','.join(gateway.endpoints)} {self.prefix}"
        self.etcd_events = EtcdEventLog(gateway, self.prefix + "events/", redactor)
        self._events = self.etcd_events  # type: ignore[assignment]  # the same three calls
        self.guards: Callable[[str], list[Compare]] = lambda _resource: []
        """Comparisons every write of ``resource`` carries (a replica's fence)."""
        self.cache = RecordCache()
        """The records this writer holds (``state.etcdcache``): off until the lock is held
        (``lock``) or a replica says which shares it holds (``reconciler.sharing``)."""

    @classmethod
    def open(cls, url: str, root: Path, redactor: Redactor = DEFAULT_REDACTOR) -> EtcdStore:
        endpoints, namespace = parse_url(url)
        return cls(root, EtcdGateway(endpoints), namespace, redactor)

    def api_calls(self) -> builtins.list[tuple[str, float]]:
        """``etcd:<call>``: the cluster's answers to this store, by kind of request."""
        return [(f"etcd:{path}", n) for path, n in list(self.gateway.calls.items())]

    # -- keys --------------------------------------------------------------------------------

    def _status_path(self, resource: str) -> Path:
        kind, name = split_resource(resource)
        return Path(f"{self.prefix}{RESOURCES_DIR}/{kind}/{name}{STATUS_SUFFIX}")

    def _history_path(self, resource: str) -> Path:
        kind, name = split_resource(resource)
        return Path(f"{self.prefix}{HISTORY_DIR}/{kind}/{name}{STATUS_SUFFIX}")

    def _get(self, resource: str) -> KeyValue | None:
        """The record of ``resource`` as this writer last saw it, when it is one it holds
        (``cache``); else read from the cluster."""
        path = str(self._status_path(resource))
        seen = self.cache.lookup(resource, path)
        if seen is None:
            epoch = self.cache.epoch
            result = self.gateway.txn([], [Get(path)])
            seen = Seen(result.found[0] if result.found else None, result.revision)
            self.cache.saw(resource, path, seen, epoch)
        kv = seen.kv
        if kv is not None and len(kv.value) > MAX_STATUS_BYTES:
            raise CorruptState(Path(path), f"holds {len(kv.value)} bytes, more than a "
                                           f"record's {MAX_STATUS_BYTES}")
        return kv

    def prefetch(self, keys: Iterable[Key]) -> None:
        """Read the records of ``keys`` this writer holds and has not seen, 128 to a
        request: a resync's passes then find them without a round trip each."""
        wanted = [(k, str(self._status_path(k))) for k in keys]
        wanted = [(k, path) for k, path in wanted
                  if self.cache.lookup(k, path, ahead=True) is None]
        for i in range(0, len(wanted), TXN_OPS):
            chunk = wanted[i:i + TXN_OPS]
            epoch = self.cache.epoch
            result = self.gateway.txn([], [Get(path) for _, path in chunk])
            for (key, path), kv in zip(chunk, result.found, strict=True):
                self.cache.saw(key, path, Seen(kv, result.revision), epoch)

    # -- statuses ----------------------------------------------------------------------------

    def load(self, resource: Key) -> ResourceStatus | None:
        kv = self._get(resource)
        return None if kv is None else self._parse_status(kv.value,
                                                          self._status_path(resource), resource)

    def written_at(self, resource: Key) -> float:
        """When the record was saved (its own ``updated_at``; 0 when absent or unreadable)."""
        with contextlib.suppress(StateError, ValueError):
            status = self.load(resource)
            if status is not None:
                return datetime.fromisoformat(status.updated_at).timestamp()
        return 0.0

    def scan(self, kind: str | None = None
             ) -> tuple[builtins.list[ResourceStatus], builtins.list[CorruptState]]:
        if kind is not None and not KIND_RE.match(kind):
            raise StateError(f"invalid kind {kind!r}")
        base = f"{self.prefix}{RESOURCES_DIR}/" + (f"{kind}/" if kind else "")
        found: builtins.list[ResourceStatus] = []
        broken: builtins.list[CorruptState] = []
        for kv in self.gateway.scan(base):
            path = Path(kv.key)
            tail = PurePosixPath(kv.key).relative_to(f"{self.prefix}{RESOURCES_DIR}")
            try:
                if len(tail.parts) != 2 or not tail.name.endswith(STATUS_SUFFIX):
                    raise CorruptState(path, "is not a record key (<Kind>/<name>.json)")
                resource = f"{tail.parts[0]}/{tail.name[: -len(STATUS_SUFFIX)]}"
                split_resource(resource)
                if len(kv.value) > MAX_STATUS_BYTES:
                    raise CorruptState(path, f"holds {len(kv.value)} bytes")
                found.append(self._parse_status(kv.value, path, resource))
            except CorruptState as exc:
                broken.append(exc)
            except StateError as exc:
                broken.append(CorruptState(path, f"is not a valid resource key ({exc})"))
        return sorted(found, key=lambda s: s.resource), broken

    def keys(self) -> builtins.list[Key]:
        base = f"{self.prefix}{RESOURCES_DIR}/"
        return sorted({key for kv in self.gateway.scan(base, keys_only=True)
                       if (key := key_of_record(kv.key[len(base):])) is not None})

    def check_layout(self, extra_files: Iterable[str] = ()) -> builtins.list[CorruptState]:
        """The local directory's own files, and the cluster answering (StateError, naming
        each member's reason, when it does not: nothing can be read or written)."""
        problems = super().check_layout(extra_files)
        self.gateway.get(self.prefix + "instance")
        return problems

    def save(self, status: ResourceStatus) -> None:
        if status.resource != f"{status.kind}/{status.name}":
            raise StateError(f"status resource {status.resource!r} does not match kind "
                             f"{status.kind!r} and name {status.name!r}")
        path = self._status_path(status.resource)
        with self._mutex(status.resource):
            self._commit(status.resource, [], [Put(str(path), self._encode(status))])

    def _commit(self, resource: str, compare: builtins.list[Compare], ops: builtins.list[Op]
                ) -> None:
        """One transaction with the resource's guards: StateFenced when they fail (nothing
        written: this replica no longer holds the share), else Conflict when ``compare``
        does."""
        guards = self.guards(resource)
        path = str(self._status_path(resource))
        epoch = self.cache.epoch
        try:
            result = self.gateway.txn([*guards, *compare], ops)
        except StateError:
            self.cache.drop(path)  # written or not: read it again
            raise
        if not result.succeeded:
            self.cache.drop(path)
            fenced(self.gateway, guards, f"the record of {resource}")
            raise Conflict(f"the record of {resource} changed while being written")
        for op in ops:  # what this write made of the record, as a read at its revision
            if isinstance(op, Put) and op.key == path:
                # create_revision is not known here and nothing reads it of a record: the
                # compare-and-swap needs mod_revision, which this write set
                kv = KeyValue(path, op.value, result.revision, result.revision)
                self.cache.saw(resource, path, Seen(kv, result.revision), epoch)
            elif isinstance(op, Delete) and op.key == path:
                self.cache.saw(resource, path, Seen(None, result.revision), epoch)

    def update(self, resource: Key, fn: Callable[[ResourceStatus], object],
               create: bool = True) -> ResourceStatus | None:
        """``Store.update`` as a compare-and-swap: another writer's change in between makes
        this one read again and apply ``fn`` to what is there now."""
        with self._mutex(resource):
            for attempt in Retrying(retry=retry_if_exception_type(Conflict),
                                    stop=stop_after_attempt(CAS_ATTEMPTS),
                                    wait=wait_random(0, 0.05), reraise=True):
                with attempt:
                    return self._update_once(resource, fn, create)
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _update_once(self, resource: Key, fn: Callable[[ResourceStatus], object],
                     create: bool) -> ResourceStatus | None:
        kind, name = split_resource(resource)
        path = self._status_path(resource)
        kv = self._get(resource)
        status = None if kv is None else self._parse_status(kv.value, path, resource)
        if status is None and not create:
            return None
        before = status.model_dump_json() if status is not None else None
        archived: builtins.list[HistoryEntry] = []
        if status is None:
            archived = self.archived_history(resource)
            status = ResourceStatus(resource=resource, kind=kind, name=name, history=archived)
        fn(status)
        if before is not None and status.model_dump_json() == before:
            return status
        revision = kv.mod_revision if kv is not None else 0
        ops: builtins.list[Op] = [Put(str(path), self._encode(status))]
        if archived:  # the record holds it now; the archive would only repeat it
            ops.append(Delete(str(self._history_path(resource))))
        self._commit(resource, [Compare.unchanged(str(path), revision)], ops)
        return status

    def delete(self, resource: Key, cause: str = "no longer desired") -> bool:
        """Remove the record; its history (with a last entry saying so) is archived in the
        same transaction."""
        path = self._status_path(resource)
        with self._mutex(resource):
            kv = self._get(resource)
            if kv is None:
                return False
            status = self._parse_status(kv.value, path, resource)
            entry = HistoryEntry(time=utc_now(), action="delete", target=resource, cause=cause,
                                 result="ok", revision=status.applied_revision)
            kept = [*self.archived_history(resource), *status.history, entry][-HISTORY_LIMIT:]
            archive = self.redactor.scrub({"resource": resource,
                                           "history": [e.model_dump(mode="json") for e in kept]})
            self._commit(resource, [Compare.unchanged(str(path), kv.mod_revision)], [
                Delete(str(path)),
                Put(str(self._history_path(resource)), json.dumps(archive).encode())])
            return True

    def quarantine(self, path: Path) -> Path | None:
        """Move a record that does not parse to ``quarantine/``, keeping its bytes."""
        tail = PurePosixPath(str(path))
        if not str(path).startswith(f"{self.prefix}{RESOURCES_DIR}/") or len(
                tail.relative_to(f"{self.prefix}{RESOURCES_DIR}").parts) != 2:
            return None
        kv = self.gateway.get(str(path))
        if kv is None:
            return None
        stamp = utc_now().replace(":", "").replace("-", "") + f"-{os.getpid()}"
        target = (f"{self.prefix}{QUARANTINE_DIR}/{tail.parent.name}/{tail.name}"
                  f".corrupt-{stamp}")
        epoch = self.cache.epoch
        result = self.gateway.txn([Compare.unchanged(str(path), kv.mod_revision)],
                                  [Delete(str(path)), Put(target, kv.value)])
        self.cache.drop(str(path))
        if not result.succeeded:
            return None
        resource = key_of_record(str(tail.relative_to(f"{self.prefix}{RESOURCES_DIR}")))
        if resource is not None:  # a record under a name no resource has is never kept
            self.cache.saw(resource, str(path), Seen(None, result.revision), epoch)
        return Path(target)

    def archived_history(self, resource: str) -> builtins.list[HistoryEntry]:
        path = self._history_path(resource)
        kv = self.gateway.get(str(path))
        if kv is None:
            return []
        try:
            raw = json.loads(kv.value)
            return [HistoryEntry.model_validate(e) for e in raw.get("history", [])]
        except (ValueError, AttributeError):
            self.events.append(resource, "Warning", "HistoryUnreadable",
                               f"archived history {path} cannot be read; starting anew")
            return []

    # -- evidence bundles (state.etcdbundles) ------------------------------------------------

    def keep_bundle(self, run_id: str, folder: Path) -> bool:
        return etcdbundles.publish(self.gateway, self.prefix, run_id, folder,
                                   self.etcd_events.guards())

    def bundle(self, run_id: str, cache: Path) -> Path | None:
        return etcdbundles.fetch(self.gateway, self.prefix, run_id, cache)

    # -- lock, instance ----------------------------------------------------------------------

    def lock(self) -> EtcdLock:  # type: ignore[override]
        """The namespace's single-writer lock: a key bound to a lease this process renews.
        While it is held, nobody else writes a record: the cache believes every one."""
        lock = EtcdLock(self.gateway, self.prefix, self.where)
        self.cache.believe(lambda _resource: lock.held)
        return lock

    def instance(self, requested: str | None) -> Owner:
        """``Store.instance``, recorded once per namespace by a create-if-absent write."""
        if requested is not None and not INSTANCE_RE.match(requested):
            raise StateError(f"invalid instance name {requested!r}: use 1-32 lowercase "
                             "letters, digits and '-', starting and ending with a letter or "
                             "digit")
        key = self.prefix + "instance"
        wanted = requested or DEFAULT_INSTANCE
        data = json.dumps({"instance": wanted, "owner": uuid.uuid4().hex,
                           "created_at": utc_now()}).encode() + b"\n"
        result = self.gateway.txn([Compare.absent(key)], [Put(key, data)],
                                  [Get(key)])
        if result.succeeded:
            return Owner(wanted, json.loads(data)["owner"])
        stored = result.found[0] if result.found else None
        if stored is None:
            raise CorruptState(Path(key), "disappeared while being read")
        name, owner_id, _, _ = self._parse_instance(stored.value, Path(key))
        if requested is not None and requested != name:
            raise StateError(f"{self.where} belongs to instance {name!r}, not {requested!r}")
        if owner_id is None:
            raise CorruptState(Path(key), "no owner ID")
        return Owner(name, owner_id)
