"""The durable store: one JSON file per resource, the event log, the lock, the instance name.

Layout under the state directory (created with mode 0700 on first write)::

    resources/<Kind>/<name>.json   ResourceStatus, replaced atomically on every save
    history/<Kind>/<name>.json     the history of a deleted resource, until it is recreated
    events.jsonl                   append-only event log
    lock                           single-writer flock (see state.lock)
    instance.json                  which reconciler instance owns this directory

One file per resource keeps a save proportional to one resource and lets a person read or
remove a single status by hand. Everything written passes through the redactor first.

Within one process, ``update`` is serialised by a lock so concurrent controller threads do not
lose each other's changes; across processes the ``StateLock`` keeps a single writer. Create one
``Store`` per state directory per process: the in-process lock and event sequence live on it.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from state.atomic import (
    DIR_MODE,
    create_exclusive,
    ensure_dir,
    fsync_dir,
    write_atomic,
)
from state.errors import CorruptState, StateError
from state.events import EventLog
from state.lock import StateLock
from state.models import HISTORY_LIMIT, HistoryEntry, ResourceStatus, utc_now
from state.redaction import DEFAULT_REDACTOR, Redactor

RESOURCES_DIR = "resources"
HISTORY_DIR = "history"
EVENTS_FILE = "events.jsonl"
INSTANCE_FILE = "instance.json"
STATUS_SUFFIX = ".json"
DEFAULT_INSTANCE = "default"

INSTANCE_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
"""Instance names end up in container labels and names: short, lowercase, DNS-label-like."""

KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
"""Spec names are DNS-label-like and run IDs allow ``_`` and ``.``; nothing else may reach
a path. A leading dot is refused so a name can never be ``..`` or hide as a dotfile."""


def split_resource(resource: str) -> tuple[str, str]:
    """``"Kind/name"`` → ``("Kind", "name")``; StateError for anything that could escape."""
    kind, sep, name = resource.partition("/")
    if not sep or not KIND_RE.match(kind):
        raise StateError(f"invalid resource {resource!r}: expected 'Kind/name'")
    if "/" in name or ".." in name or not NAME_RE.match(name):
        raise StateError(
            f"invalid resource name {name!r} in {resource!r}: refusing it as a file name"
        )
    return kind, name


def _summary(exc: ValidationError) -> str:
    """A one-line reason; pydantic's full text repeats (possibly large) file content."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


class Store:
    """Resource statuses, events, lock and instance name under one state directory."""

    def __init__(self, root: Path, redactor: Redactor = DEFAULT_REDACTOR) -> None:
        self.root = Path(root)
        self.redactor = redactor
        self._mutex = threading.RLock()
        self._events = EventLog(self.root / EVENTS_FILE, redactor)

    # -- paths -------------------------------------------------------------------------------

    def _status_path(self, resource: str) -> Path:
        kind, name = split_resource(resource)
        return self.root / RESOURCES_DIR / kind / (name + STATUS_SUFFIX)

    def _history_path(self, resource: str) -> Path:
        kind, name = split_resource(resource)
        return self.root / HISTORY_DIR / kind / (name + STATUS_SUFFIX)

    # -- statuses ----------------------------------------------------------------------------

    def load(self, resource: str) -> ResourceStatus | None:
        """The saved status of ``resource``, or None; CorruptState names an unparsable file."""
        return self._load_path(self._status_path(resource))

    @staticmethod
    def _load_path(path: Path) -> ResourceStatus | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return ResourceStatus.model_validate_json(data)
        except ValidationError as exc:
            raise CorruptState(path, _summary(exc)) from exc

    def list(self, kind: str | None = None) -> builtins.list[ResourceStatus]:
        """All saved statuses (of ``kind`` if given), sorted by resource."""
        base = self.root / RESOURCES_DIR
        if kind is not None:
            if not KIND_RE.match(kind):
                raise StateError(f"invalid kind {kind!r}")
            kind_dirs = [base / kind]
        else:
            kind_dirs = sorted(p for p in base.glob("*") if p.is_dir()) if base.is_dir() else []
        found: builtins.list[ResourceStatus] = []
        for kind_dir in kind_dirs:
            if not kind_dir.is_dir():
                continue
            for path in kind_dir.glob("*" + STATUS_SUFFIX):
                if path.name.startswith("."):
                    continue  # temporary files of an interrupted write
                status = self._load_path(path)
                if status is not None:
                    found.append(status)
        return sorted(found, key=lambda s: s.resource)

    def save(self, status: ResourceStatus) -> None:
        """Stamp ``updated_at``, scrub secrets and replace the status file atomically."""
        path = self._status_path(status.resource)
        if status.resource != f"{status.kind}/{status.name}":
            raise StateError(
                f"status resource {status.resource!r} does not match "
                f"kind {status.kind!r} and name {status.name!r}"
            )
        with self._mutex:
            status.updated_at = utc_now()
            payload = self.redactor.scrub(status.model_dump(mode="json"))
            data = json.dumps(payload, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
            ensure_dir(path.parent, DIR_MODE)
            write_atomic(path, data)

    def update(
        self,
        resource: str,
        kind: str,
        name: str,
        fn: Callable[[ResourceStatus], None],
    ) -> ResourceStatus:
        """Load (or create) ``resource``, let ``fn`` change it in place, save and return it.

        Serialised within the process, so read-modify-write from several threads is safe. If
        ``fn`` raises, nothing is saved.
        """
        if resource != f"{kind}/{name}":
            raise StateError(f"resource {resource!r} does not match kind {kind!r}, name {name!r}")
        with self._mutex:
            status = self.load(resource)
            restored = status is None and self._history_path(resource).exists()
            if status is None:
                status = ResourceStatus(resource=resource, kind=kind, name=name,
                                        history=self.archived_history(resource))
            fn(status)
            self.save(status)
            if restored:  # the record holds it now; the archive would only repeat it
                self._history_path(resource).unlink(missing_ok=True)
            return status

    def delete(self, resource: str, cause: str = "no longer desired") -> bool:
        """Remove the status of ``resource``; False if there was none.

        Its history is evidence of what was done, so it is kept (with a last entry saying it
        was deleted) and given back if a resource of the same name is created again.
        """
        path = self._status_path(resource)
        with self._mutex:
            status = self.load(resource)
            if status is None:
                return False
            entry = HistoryEntry(time=utc_now(), action="delete", target=resource, cause=cause,
                                 result="ok", revision=status.applied_revision)
            self._archive(resource, [*status.history, entry])
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            fsync_dir(path.parent)
            return True

    def quarantine(self, path: Path) -> Path | None:
        """Move a corrupt file of ``resources/`` aside (``NAME.json.corrupt-TIME``), keeping
        its bytes for a person to inspect, so the resource can be reconciled again from what
        the engines show; None if ``path`` is not a status file of this store or is gone."""
        base = (self.root / RESOURCES_DIR).resolve()
        try:
            if not path.resolve().is_relative_to(base) or path.resolve() == base:
                return None
        except OSError:
            return None
        stamp = utc_now().replace(":", "").replace("-", "")
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        with self._mutex:
            try:
                os.rename(path, target)
            except FileNotFoundError:
                return None
            fsync_dir(path.parent)
        return target

    def archived_history(self, resource: str) -> builtins.list[HistoryEntry]:
        """The history a deleted ``resource`` left behind (empty if none, or unreadable: a
        damaged archive must not block creating the resource again)."""
        path = self._history_path(resource)
        try:
            raw = json.loads(path.read_bytes())
            return [HistoryEntry.model_validate(e) for e in raw.get("history", [])]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, AttributeError):
            self.events.append(resource, "Warning", "HistoryUnreadable",
                               f"archived history {path} cannot be read; starting anew")
            return []

    def _archive(self, resource: str, history: builtins.list[HistoryEntry]) -> None:
        kept = [*self.archived_history(resource), *history][-HISTORY_LIMIT:]
        path = self._history_path(resource)
        payload = self.redactor.scrub({"resource": resource,
                                       "history": [e.model_dump(mode="json") for e in kept]})
        ensure_dir(path.parent, DIR_MODE)
        write_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False).encode() + b"\n")

    # -- events, lock, instance --------------------------------------------------------------

    @property
    def events(self) -> EventLog:
        """The event log of this directory, scrubbed by the store's redactor."""
        return self._events

    def lock(self) -> StateLock:
        """A new (not yet acquired) single-writer lock on this directory."""
        return StateLock(self.root)

    def instance(self, requested: str | None) -> str:
        """The reconciler instance that owns this directory, recorded on first use.

        First use stores ``requested`` (or ``"default"``); afterwards a different non-None
        ``requested`` is refused, because pruning by labels would then judge another
        instance's containers as ours or ours as foreign.
        """
        if requested is not None and not INSTANCE_RE.match(requested):
            raise StateError(
                f"invalid instance name {requested!r}: use 1-32 lowercase letters, digits "
                "and '-', starting and ending with a letter or digit"
            )
        path = self.root / INSTANCE_FILE
        stored = self._read_instance(path)
        if stored is None:
            wanted = requested or DEFAULT_INSTANCE
            ensure_dir(self.root, DIR_MODE)
            data = json.dumps({"instance": wanted, "created_at": utc_now()}).encode() + b"\n"
            # Exclusive create: of two processes racing here only one name can win.
            if create_exclusive(path, data):
                return wanted
            stored = self._read_instance(path)
            if stored is None:
                raise CorruptState(path, "disappeared while being read")
        if requested is not None and requested != stored:
            raise StateError(
                f"state dir {self.root} belongs to instance {stored!r}, not {requested!r}"
            )
        return stored

    @staticmethod
    def _read_instance(path: Path) -> str | None:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            info = json.loads(raw)
        except ValueError as exc:
            raise CorruptState(path, f"not JSON: {exc}") from exc
        name = info.get("instance") if isinstance(info, dict) else None
        if not isinstance(name, str) or not INSTANCE_RE.match(name):
            raise CorruptState(path, "no valid 'instance' name")
        return name
