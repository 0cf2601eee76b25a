"""The durable store: one JSON file per resource, the event log, the lock, the instance name.

Layout under the state directory (created with mode 0700 on first write)::

    resources/<Kind>/<name>.json   ResourceStatus, replaced atomically on every save
    history/<Kind>/<name>.json     the history of a deleted resource, until it is recreated
    events.jsonl                   append-only event log
    lock                           single-writer flock (see state.lock)
    instance.json                  which reconciler instance owns this directory

One file per resource keeps a save proportional to one resource and lets a person read or
remove a single status by hand. Everything written passes through the redactor first.

Everything here is read from outside our control (a hand edit, a disk fault, another user): a
file that cannot be used is reported as :class:`CorruptState` naming it and why, never as a
traceback; :meth:`Store.scan` returns the good records beside the broken files so ``status`` can
still show what it knows. The directory must be private (:func:`check_private_dir`) and no link
inside it is followed (see ``state.atomic``).

``instance.json`` also records the directory's owner ID (:class:`~state.models.Owner`): two state
directories that share an instance name must not take each other's containers for their own.

Within one process, ``update`` is serialised by a lock so concurrent controller threads do not
lose each other's changes; across processes the ``StateLock`` keeps a single writer. Create one
``Store`` per state directory per process: the in-process lock and event sequence live on it.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import stat
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import ValidationError

from state.atomic import (
    DIR_MODE,
    check_private_dir,
    create_exclusive,
    ensure_dir,
    fsync_dir,
    os_reason,
    read_file,
    write_atomic,
)
from state.errors import CorruptState, StateError
from state.events import EventLog
from state.keys import KIND_RE, NAME_RE, InvalidKey, Key
from state.lock import LOCK_FILE, StateLock
from state.models import HISTORY_LIMIT, OWNER_ID_RE, HistoryEntry, Owner, ResourceStatus, utc_now
from state.redaction import DEFAULT_REDACTOR, Redactor

RESOURCES_DIR = "resources"
HISTORY_DIR = "history"
EVENTS_FILE = "events.jsonl"
INSTANCE_FILE = "instance.json"
STATUS_SUFFIX = ".json"
DEFAULT_INSTANCE = "default"
LOG_FILE_NAME = "reconciler.log"  # structured logs (reconciler.logsetup)
SOCKET_NAME = "control.sock"  # the running daemon's endpoint (reconciler.control)
FIXED_FILES = (EVENTS_FILE, INSTANCE_FILE, LOCK_FILE)
"""Files at the top of the state directory; each must be a regular file when it exists."""

MAX_STATUS_BYTES = 16 * 1024 * 1024
"""A status keeps bounded history; a bigger file is not one of ours and is not read whole."""

OWNER_MIGRATION_NS = uuid.UUID("6f0d1c52-4a8e-4d51-9a55-2f1f3b7f0c11")
"""Namespace of owner IDs derived for an ``instance.json`` written before owner IDs existed."""

LINK_REASON = "is a symbolic link; links inside the state directory are never followed"

INSTANCE_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
"""Instance names end up in container labels and names: short, lowercase, DNS-label-like."""



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


def _tree_problem(path: Path) -> str | None:
    """Why a folder inside the state tree cannot be used, or None (also when it is missing)."""
    return _entry_problem(path, stat.S_ISDIR, "is not a directory")


def _fixed_file_problem(path: Path) -> str | None:
    """Why a top-level state file (events, instance, lock, log) cannot be used, or None."""
    return _entry_problem(path, stat.S_ISREG, "is not a regular file")


def _entry_problem(path: Path, right_type: Callable[[int], bool], wrong: str) -> str | None:
    """Never follows a link: a symlink in the state tree could redirect our writes."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return os_reason(exc)
    if stat.S_ISLNK(mode):
        return LINK_REASON
    return None if right_type(mode) else wrong


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
        # One lock per resource, not one for the store: read-modify-write of a record must be
        # serialised, but a pass over one resource has no reason to wait for another's (at
        # 1,000 resources a resync's workers queued on one store-wide lock for most of it).
        self._locks_guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}
        self._events = EventLog(self.root / EVENTS_FILE, redactor)

    # -- paths -------------------------------------------------------------------------------

    def _mutex(self, resource: str) -> threading.RLock:
        """The lock of ``resource``'s record (and its archived history)."""
        with self._locks_guard:
            lock = self._locks.get(resource)
            if lock is None:
                lock = self._locks[resource] = threading.RLock()
            return lock

    def _status_path(self, resource: str) -> Path:
        kind, name = split_resource(resource)
        return self.root / RESOURCES_DIR / kind / (name + STATUS_SUFFIX)

    def api_calls(self) -> builtins.list[tuple[str, float]]:
        """(target, calls so far) of a store that is reached over an API; files: none."""
        return []

    def prefetch(self, keys: Iterable[Key]) -> None:
        """Read ahead the records of ``keys`` that a resync's passes are about to load (a
        store over a network: ``EtcdStore``); files need nothing (the page cache)."""

    def status_file(self, resource: Key) -> Path:
        """Where ``resource``'s status is saved (another process's store is read by copying
        that one file, which an atomic save never leaves half-written)."""
        return self._status_path(resource)

    def _history_path(self, resource: str) -> Path:
        kind, name = split_resource(resource)
        return self.root / HISTORY_DIR / kind / (name + STATUS_SUFFIX)

    # -- statuses ----------------------------------------------------------------------------

    def _check_tree(self, path: Path) -> None:
        """CorruptState if ``resources/`` or the kind folder above ``path`` is a link or not a
        folder: O_NOFOLLOW guards only the last component of a path."""
        for folder in (self.root / RESOURCES_DIR, path.parent):
            problem = _tree_problem(folder)
            if problem is not None:
                raise CorruptState(folder, problem)

    def load(self, resource: Key) -> ResourceStatus | None:
        """The saved status of ``resource``, or None; CorruptState names an unusable file."""
        path = self._status_path(resource)
        self._check_tree(path)
        return self._load_path(path, resource)

    def written_at(self, resource: Key) -> float:
        """When ``resource``'s status was last saved (unix seconds; 0 when it never was): how
        a follower of another process's store tells how fresh its record is."""
        try:
            return self._status_path(resource).stat().st_mtime
        except OSError:
            return 0.0

    @staticmethod
    def _load_path(path: Path, resource: str) -> ResourceStatus | None:
        data = read_file(path, MAX_STATUS_BYTES)
        return None if data is None else Store._parse_status(data, path, resource)

    @staticmethod
    def _parse_status(data: bytes, path: Path, resource: str) -> ResourceStatus:
        """A record's bytes as ``resource``'s status (``path``: where they came from)."""
        try:
            status = ResourceStatus.model_validate_json(data)
        except ValidationError as exc:
            raise CorruptState(path, _summary(exc)) from None
        if (status.resource, status.kind, status.name) != (resource, *split_resource(resource)):
            # Saving it would write another resource's file; trusting it would show a lie.
            raise CorruptState(path, f"holds resource {status.resource!r} (kind {status.kind!r},"
                               f" name {status.name!r}), but its path says {resource!r}")
        return status

    def list(self, kind: str | None = None) -> builtins.list[ResourceStatus]:
        """All saved statuses (of ``kind`` if given), sorted by resource; raises the first
        CorruptState found (use :meth:`scan` to get good records despite broken files)."""
        found, broken = self.scan(kind)
        if broken:
            raise broken[0]
        return found

    def scan(
        self, kind: str | None = None
    ) -> tuple[builtins.list[ResourceStatus], builtins.list[CorruptState]]:
        """Good statuses (of ``kind`` if given, sorted by resource) and every file or folder of
        the resource tree that cannot be used, each naming its path and why."""
        if kind is not None and not KIND_RE.match(kind):
            raise StateError(f"invalid kind {kind!r}")
        base = self.root / RESOURCES_DIR
        broken: builtins.list[CorruptState] = []
        if kind is not None:
            kind_dirs = [base / kind]
        else:
            kind_dirs = [base / name for name in self._entries(base, broken)]
        found: builtins.list[ResourceStatus] = []
        for kind_dir in kind_dirs:
            for name in self._entries(kind_dir, broken):
                if not name.endswith(STATUS_SUFFIX):
                    continue
                path = kind_dir / name
                try:
                    resource = f"{kind_dir.name}/{name[: -len(STATUS_SUFFIX)]}"
                    split_resource(resource)
                    status = self._load_path(path, resource)
                except CorruptState as exc:
                    broken.append(exc)
                    continue
                except StateError as exc:
                    broken.append(CorruptState(path, f"is not a valid resource file name ({exc})"))
                    continue
                if status is not None:
                    found.append(status)
        return sorted(found, key=lambda s: s.resource), broken

    def keys(self) -> builtins.list[Key]:
        """Every resource with a record, readable or not, sorted, without reading a record: a
        record that cannot be parsed still stands for something we may own. A name that is no
        resource's, and a folder that cannot be listed, are left to ``scan`` to report."""
        base = self.root / RESOURCES_DIR
        ignored: builtins.list[CorruptState] = []
        return sorted({key for kind in self._entries(base, ignored)
                       for name in self._entries(base / kind, ignored)
                       if (key := key_of_record(f"{kind}/{name}")) is not None})

    @staticmethod
    def _entries(folder: Path, broken: builtins.list[CorruptState]) -> builtins.list[str]:
        """Sorted names in ``folder`` (none if missing), skipping dotfiles (temporary files of
        an interrupted write); a folder that is a link, a file or unreadable goes to ``broken``."""
        problem = _tree_problem(folder)
        if problem is not None:
            broken.append(CorruptState(folder, problem))
            return []
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        except OSError as exc:
            broken.append(CorruptState(folder, os_reason(exc)))
            return []
        return sorted(name for name in names if not name.startswith("."))

    def check_root(self) -> None:
        """StateError unless the state directory is private to this user (or absent)."""
        check_private_dir(self.root)

    def check_layout(self, extra_files: Iterable[str] = ()) -> builtins.list[CorruptState]:
        """Problems of the directory's top-level files (``events.jsonl``, ``instance.json``,
        ``lock`` and ``extra_files``) and the ``resources`` folder: links, folders or other
        non-files where a file belongs. Raises StateError for a directory not private to us."""
        self.check_root()
        problems = []
        for name in (*FIXED_FILES, *extra_files):
            problem = _fixed_file_problem(self.root / name)
            if problem is not None:
                problems.append(CorruptState(self.root / name, problem))
        problem = _tree_problem(self.root / RESOURCES_DIR)
        if problem is not None:
            problems.append(CorruptState(self.root / RESOURCES_DIR, problem))
        return problems

    def save(self, status: ResourceStatus) -> None:
        """Stamp ``updated_at``, scrub secrets and replace the status file atomically."""
        path = self._status_path(status.resource)
        if status.resource != f"{status.kind}/{status.name}":
            raise StateError(
                f"status resource {status.resource!r} does not match "
                f"kind {status.kind!r} and name {status.name!r}"
            )
        with self._mutex(status.resource):
            data = self._encode(status)
            self._check_tree(path)
            try:
                ensure_dir(path.parent, DIR_MODE)
                write_atomic(path, data)
            except OSError as exc:
                raise StateError(f"cannot write state file {path}: {os_reason(exc)}") from None

    def _encode(self, status: ResourceStatus) -> bytes:
        """Stamp ``updated_at`` and scrub: the bytes a save writes."""
        status.updated_at = utc_now()
        payload = self.redactor.scrub(status.model_dump(mode="json"))
        return json.dumps(payload, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"

    def update(
        self,
        resource: Key,
        fn: Callable[[ResourceStatus], object],  # what it returns is ignored
        create: bool = True,
    ) -> ResourceStatus | None:
        """Load (or create) ``resource``, let ``fn`` change it in place, save and return it.

        Serialised within the process, so read-modify-write from several threads is safe. If
        ``fn`` raises, nothing is saved; if it changed nothing, nothing is written either (a
        pass over a converged resource leaves its file, and its mtime, alone). With
        ``create=False`` a resource without a record is left so (None): a background writer
        must never bring back a record that a prune just removed.
        """
        kind, name = split_resource(resource)
        with self._mutex(resource):
            status = self.load(resource)
            restored = status is None and self._history_path(resource).exists()
            # Serialised (in pydantic-core), not deep-copied: a StreamSet's record with 49
            # sources took 3 ms to copy, and a no-op pass compares it several times.
            before = status.model_dump_json() if status is not None else None
            if status is None and not create:
                return None
            if status is None:
                status = ResourceStatus(resource=resource, kind=kind, name=name,
                                        history=self.archived_history(resource))
            fn(status)
            if before is not None and status.model_dump_json() == before:
                return status
            self.save(status)
            if restored:  # the record holds it now; the archive would only repeat it
                self._history_path(resource).unlink(missing_ok=True)
            return status

    def update_unless_known(
        self,
        resource: Key,
        fn: Callable[[ResourceStatus], object],  # what it returns is ignored
        known: ResourceStatus | None,
    ) -> bool:
        """:meth:`update`, unless ``fn`` leaves ``known`` as it is (then False).

        ``known`` is the record as the caller's pass last read it, the caller's own object,
        which ``fn`` may change in place. When ``fn`` changes nothing there, the record already
        says it and nothing is read or written: a no-op pass over a StreamSet of 49 sources
        used to read, re-validate and compare its ~50 KB record twice more for two writes that
        changed nothing. Only for what no other writer changes between that read and now (this
        resource's own pass writes its desired fields and verdict; a background writer only
        its own facts)."""
        if known is not None:
            before = known.model_dump_json()
            fn(known)
            if known.model_dump_json() == before:
                return False
        self.update(resource, fn)
        return True

    def delete(self, resource: Key, cause: str = "no longer desired") -> bool:
        """Remove the status of ``resource``; False if there was none.

        Its history is evidence of what was done, so it is kept (with a last entry saying it
        was deleted) and given back if a resource of the same name is created again.
        """
        path = self._status_path(resource)
        with self._mutex(resource):
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
        try:  # the entry itself (a link is moved, not followed), one level below a kind
            if path.parent.resolve().parent != base or (path.is_dir() and not path.is_symlink()):
                return None
        except OSError:
            return None
        stamp = utc_now().replace(":", "").replace("-", "") + f"-{os.getpid()}-{id(path)}"
        target = path.with_name(f"{path.name}.corrupt-{stamp}")
        with self._mutex(f"{path.parent.name}/{path.name.removesuffix(STATUS_SUFFIX)}"):
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

    # -- evidence bundles --------------------------------------------------------------------

    def keep_bundle(self, run_id: str, folder: Path) -> bool:
        """Keep a terminal run's evidence ``folder`` where every reader of this store finds
        it. Files: it is already (the folder is on this machine); True when stored now."""
        return False

    def bundle(self, run_id: str, cache: Path) -> Path | None:
        """A copy of run ``run_id``'s evidence kept by the store, unpacked under ``cache``
        (None: the store keeps none; files read the evidence folder itself)."""
        return None

    # -- events, lock, instance --------------------------------------------------------------

    @property
    def events(self) -> EventLog:
        """The event log of this directory, scrubbed by the store's redactor."""
        return self._events

    def lock(self) -> StateLock:
        """A new (not yet acquired) single-writer lock on this directory."""
        return StateLock(self.root)

    def instance(self, requested: str | None) -> Owner:
        """The reconciler instance that owns this directory, recorded on first use, with the
        directory's owner ID.

        First use stores ``requested`` (or ``"default"``) and a random owner ID; afterwards a
        different non-None ``requested`` is refused, because pruning by labels would then judge
        another instance's containers as ours or ours as foreign. A file written before owner
        IDs existed gets one added, once and atomically.
        """
        if requested is not None and not INSTANCE_RE.match(requested):
            raise StateError(
                f"invalid instance name {requested!r}: use 1-32 lowercase letters, digits "
                "and '-', starting and ending with a letter or digit"
            )
        self.check_root()
        path = self.root / INSTANCE_FILE
        stored = self._read_instance(path)
        if stored is None:
            wanted = requested or DEFAULT_INSTANCE
            new_id = uuid.uuid4().hex
            ensure_dir(self.root, DIR_MODE)
            data = json.dumps({"instance": wanted, "owner": new_id,
                               "created_at": utc_now()}).encode() + b"\n"
            # Exclusive create: of two processes racing here only one name can win.
            if create_exclusive(path, data):
                return Owner(wanted, new_id)
            stored = self._read_instance(path)
            if stored is None:
                raise CorruptState(path, "disappeared while being read")
        name, owner_id, info, raw = stored
        if requested is not None and requested != name:
            raise StateError(
                f"state dir {self.root} belongs to instance {name!r}, not {requested!r}"
            )
        if owner_id is None:
            owner_id = self._add_owner_id(path, info, raw)
        return Owner(name, owner_id)

    def _add_owner_id(self, path: Path, info: dict[str, object], raw: bytes) -> str:
        """Record an owner ID in an ``instance.json`` that has none (written before they
        existed). The ID is derived from this directory's real path and the file's bytes, so
        processes migrating at once all write the same file and none of them uses an ID the
        file does not keep; a second directory gets another ID even with the same content."""
        seed = f"{os.path.realpath(self.root)}\0{raw.hex()}"
        owner_id = uuid.uuid5(OWNER_MIGRATION_NS, seed).hex
        data = json.dumps({**info, "owner": owner_id}).encode() + b"\n"
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise StateError(f"cannot record an owner ID in {path}: {os_reason(exc)}") from None
        return owner_id

    @staticmethod
    def _read_instance(path: Path) -> tuple[str, str | None, dict[str, object], bytes] | None:
        """(instance name, owner ID or None, the whole record, its bytes), or None if absent."""
        raw = read_file(path, MAX_STATUS_BYTES)
        return None if raw is None else Store._parse_instance(raw, path)

    @staticmethod
    def _parse_instance(raw: bytes, path: Path) -> tuple[str, str | None, dict[str, object],
                                                          bytes]:
        """``_read_instance`` of the record's bytes (``path``: where they came from)."""
        try:
            info = json.loads(raw)
        except ValueError as exc:  # also invalid UTF-8
            raise CorruptState(path, f"not JSON: {exc}") from None
        if not isinstance(info, dict):
            raise CorruptState(path, f"holds a JSON {type(info).__name__}, not an object")
        name = info.get("instance")
        if not isinstance(name, str) or not INSTANCE_RE.match(name):
            raise CorruptState(path, "no valid 'instance' name")
        owner_id = info.get("owner")
        if owner_id is not None and (not isinstance(owner_id, str)
                                     or not re.match(OWNER_ID_RE, owner_id)):
            raise CorruptState(path, "'owner' is not an owner ID (32 lowercase hex digits)")
        return name, owner_id, info, raw


def key_of_record(relative: str) -> Key | None:
    """The resource whose record is ``<Kind>/<name>.json`` (relative to the records' root),
    or None for anything else."""
    kind, slash, name = relative.partition("/")
    if not slash or "/" in name or not name.endswith(STATUS_SUFFIX):
        return None
    try:
        return Key(kind, name[: -len(STATUS_SUFFIX)])
    except InvalidKey:
        return None
