"""A folder of spec files, watched with inotify (watchfiles), read until it holds still."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import tenacity
import watchfiles

from controllers.waiting import pause
from reconciler.sources.base import (
    EitherEvent,
    Snapshot,
    SourceError,
    wait_either,
)
from reconciler.sources.saves import FileSig, ReplacedFiles, relative_key, signature
from specs.errors import Location, SpecError, SpecIssue
from specs.loader import (
    DEFAULT_LIMITS,
    EDITOR_TEMP,
    IGNORED_DIRS,
    SPEC_SUFFIXES,
    LoaderLimits,
    read_spec_bytes,
    spec_files,
)
from specs.trust import NOTHING, TrustPolicy
from specs.validate import SpecSet, load_spec_set

DIGEST_PREFIX = "sha256:"
# A folder is read until two reads a quiet period apart agree (and parsing saw the same bytes);
# this many tries, then the revision is refused until the next change.
FOLDER_READ_ATTEMPTS = 5
# watchfiles: how long a quiet spell ends a batch, and how often its Rust loop looks at our stop
# flag; small so that a save is noticed (and a stop honoured) well inside a second.
WATCH_STEP_MS = 20
# Idle tick of the folder watcher: on each one we check the folder is still the one being
# watched (deleted or replaced folders lose their inotify watch), and the first tick after
# arming re-reads the folder to cover changes made before the watch was in place.
WATCH_TICK_MS = 200
# How long to wait before trying to watch a folder that cannot be watched (e.g. missing).
WATCH_RETRY_S = 1.0
# A folder must read the same before and after this long without writes before it is used:
# longer than an editor's truncate-then-write save takes, short enough not to be noticed.
QUIET_PERIOD_S = 0.5




class FolderSource:
    """Spec files under a folder (recursively), watched with inotify through watchfiles.

    Errors name files as ``str(path / relative)``: the real file a person opens to fix it.
    """

    def __init__(self, path: Path, debounce_ms: int = 50, quiet_s: float = QUIET_PERIOD_S,
                 limits: LoaderLimits = DEFAULT_LIMITS, trust: TrustPolicy = NOTHING) -> None:
        self.path = path
        self.trust = trust  # what its specs may read and run: nothing unless the operator says
        self.name = f"folder:{path}"
        self.debounce_ms = debounce_ms
        self.quiet_s = quiet_s
        self.limits = limits
        self._poke = threading.Event()
        self._seen_lock = threading.Lock()
        # The last revision that load() read or watch() reported; watch() stays quiet while
        # the folder still hashes to it.
        self._seen: str | None = None
        self._stop: threading.Event | None = None  # the watcher's: ends the quiet wait
        # The last good snapshot: a folder that hashes the same (`reconciler sync`, an editor
        # that saved without changing a byte) is not parsed again -- 20 StreamSets of 49
        # sources took 0.2 s of pure-Python YAML per look.
        self._last: Snapshot | None = None
        self._last_files: dict[str, FileSig] = {}  # each file of _last as it was read
        self._replaced = ReplacedFiles(path)  # what the watcher saw renamed into place
        # How the last revision read was trusted: "rename" (every changed file was renamed
        # over the one last read) or "quiet period"; what the tests of reconciler.saves read.
        self.settled_by = ""
        self.armed = threading.Event()  # set while an inotify watch is in place

    def load(self) -> Snapshot:
        """Read the folder once it has settled: its content must hash the same before and after
        a quiet period and again after parsing, so a file caught half-written (an editor that
        truncates, then writes) is never acted on. Files renamed over the ones last read (a
        safe write) are whole when they appear: they skip the quiet period (reconciler.saves)."""
        try:
            for attempt in tenacity.Retrying(
                    stop=tenacity.stop_after_attempt(FOLDER_READ_ATTEMPTS),
                    retry=tenacity.retry_if_exception_type(_StillChanging), reraise=True):
                with attempt:
                    return self._load_settled()
        except _StillChanging:
            pass
        self._mark_seen(None)
        raise SourceError(f"files under {self.path} kept changing while being read "
                          f"({FOLDER_READ_ATTEMPTS} reads); they are read again on the next "
                          "change")

    def _load_settled(self) -> Snapshot:
        mark = self._replaced.mark()
        state = self._state_or_raise()
        last, last_files = self._last, self._last_files
        # Files renamed over the ones last read are whole: no quiet period for them, unless
        # what they say as a whole is doubtful (see _doubtful).
        renamed = last is not None and self._replaced.explains(last_files, state.files)
        if not renamed:
            self._settle(state)
        if last is not None and last.revision == state.revision:
            self._mark_seen(state.revision)
            return last
        error: SpecError | None = None
        spec_set = SpecSet()
        try:
            spec_set = load_spec_set([self.path], limits=self.limits, trust=self.trust)
        except SpecError as exc:
            error = exc
        if self._state_or_raise().revision != state.revision:
            raise _StillChanging  # written to while we parsed: it may mix two versions
        if renamed and _doubtful(last, spec_set, error):
            self._settle(state)
            renamed = False
        self.settled_by = "rename" if renamed else "quiet period"
        self._mark_seen(state.revision)
        emptied = _emptied(self.path, last, last_files, state.files)
        if emptied:
            raise SourceError(f"{self.name}: a spec file was emptied", emptied,
                              revision=state.revision)
        if error is not None:
            raise SourceError(f"{self.name}: invalid specs", error.issues,
                              revision=state.revision)
        self._replaced.read(mark)  # deletions before the mark are in the new _last_files
        self._last = Snapshot(revision=state.revision, spec_set=spec_set, root=self.path)
        self._last_files = state.files
        return self._last

    def _settle(self, state: FolderState) -> None:
        """Wait out the quiet period after the newest write; the folder must then still read
        as ``state``."""
        quiet_left = self.quiet_s - (time.time() - state.newest)
        if quiet_left > 0:  # written just now: wait, then it must still read the same
            pause(self._stop, min(quiet_left, self.quiet_s))  # Stopped when shutting down
            if self._state_or_raise().revision != state.revision:
                raise _StillChanging

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        """Watch in the caller's thread; re-arm when the folder appears, vanishes or is
        replaced, and re-check the content on each arming so that nothing changed in between
        goes unnoticed."""
        self._stop = stop
        while not stop.is_set():
            if self._poke.is_set():
                self._poke.clear()
                self._mark_seen(self._digest())
                changed()
            else:
                self._notify_if_new(changed)
            identity = _identity(self.path)
            if identity is None or not self._watch_once(stop, changed, identity):
                wait_either(stop, self._poke, WATCH_RETRY_S)

    def poke(self) -> None:
        self._poke.set()

    def is_relevant(self, change: watchfiles.Change, path: str) -> bool:
        """watchfiles filter: drop editor temporaries and VCS internals, which never change
        what load() reads (the digest check would drop them too; this saves the re-hash)."""
        del change
        name = os.path.basename(path)
        if EDITOR_TEMP.search(name):
            return False
        if name.startswith(".") and not name.endswith(SPEC_SUFFIXES):
            return False
        try:
            parts = Path(path).relative_to(self.path).parts
        except ValueError:
            return True
        return not IGNORED_DIRS.intersection(parts)

    def _watch_once(self, stop: threading.Event, changed: Callable[[], None],
                    identity: tuple[int, int]) -> bool:
        """One arming of watchfiles; False if it could not watch (caller waits, retries)."""
        batches = watchfiles.watch(
            self.path, watch_filter=self.is_relevant, debounce=self.debounce_ms,
            step=WATCH_STEP_MS, stop_event=EitherEvent(stop, self._poke),
            rust_timeout=WATCH_TICK_MS, yield_on_timeout=True, raise_interrupt=False)
        first = True
        self.armed.clear()
        with contextlib.closing(batches):
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return True  # stopped or poked: the caller's loop handles both
                except (OSError, RuntimeError):
                    return False  # e.g. the folder vanished while being armed
                if batch or first:
                    self.armed.set()  # watchfiles yields only once its watch is in place
                    self._replaced.observe(batch)
                    self._notify_if_new(changed)
                    first = False
                elif _identity(self.path) != identity:
                    return True  # our inotify watch is on a folder that is gone: re-arm

    def _notify_if_new(self, changed: Callable[[], None]) -> None:
        digest = self._digest()
        with self._seen_lock:
            if digest == self._seen:
                return
            self._seen = digest
        changed()

    def _mark_seen(self, revision: str | None) -> None:
        with self._seen_lock:
            self._seen = revision

    def _digest(self) -> str:
        """The folder's revision, or a marker for "cannot be read" (which load() will explain)."""
        try:
            return folder_state(self.path, self.limits).revision
        except SpecError as exc:
            return "unreadable:" + "; ".join(str(i) for i in exc.issues)

    def _state_or_raise(self) -> FolderState:
        try:
            return folder_state(self.path, self.limits)
        except SpecError as exc:
            raise SourceError(f"{self.name}: cannot read the folder as a whole, so nothing of "
                              "it is used", exc.issues) from None


class _StillChanging(Exception):
    """The folder's content changed between two reads."""


def folder_digest(root: Path, limits: LoaderLimits = DEFAULT_LIMITS) -> str:
    """``sha256:<hex>`` over the sorted (relative path, bytes) of the spec files under ``root``."""
    return folder_state(root, limits).revision


class FolderState(NamedTuple):
    """One reading of a folder: its revision, the newest change time (mtime or ctime) of its
    spec files and folders, which tells whether it has been quiet long enough to trust, and
    each spec file's signature by relative path, which tells how it changed."""

    revision: str
    newest: float
    files: dict[str, FileSig]


def folder_state(root: Path, limits: LoaderLimits = DEFAULT_LIMITS) -> FolderState:
    """Read the folder's spec files once (see FolderState).

    Lengths are hashed before each field so that no two different folders collide by moving
    bytes between a name and a content. A file that cannot be read (or is over the size
    limit) gets a marker with the reason; load_spec_set refuses it. Raises SpecError if the
    folder is missing or any folder below it cannot be listed.
    """
    digest = hashlib.sha256()
    files = spec_files([root])
    newest = _changed_at(root)
    for folder in {f.parent for f in files}:
        newest = max(newest, _changed_at(folder))
    sigs: dict[str, FileSig] = {}
    for file in files:
        rel = file.relative_to(root).as_posix()
        name = rel.encode("utf-8", "surrogateescape")
        digest.update(len(name).to_bytes(8, "big") + name)
        sig = signature(file)
        if sig is None:  # vanishing as we look: as fresh as a change can be
            newest = time.time()
        else:
            sigs[rel] = sig
            newest = max(newest, sig[3] / 1e9, sig[4] / 1e9)
        try:
            data = read_spec_bytes(file, limits)
        except SpecError as exc:
            data = b"\xff" * 8 + str(exc).encode("utf-8", "replace")
        digest.update(len(data).to_bytes(8, "big") + data)
    return FolderState(DIGEST_PREFIX + digest.hexdigest(), newest, sigs)


def _doubtful(last: Snapshot | None, spec_set: SpecSet, error: SpecError | None) -> bool:
    """A revision made of whole files can still be half of a change spread over several files
    (a resource moved from one file to another, a reference to a file not renamed in yet): one
    that is invalid or removes a resource waits the quiet period like any other."""
    if error is not None or last is None:
        return True
    keys = {(r.kind, r.metadata.name) for r in spec_set.resources}
    return any((r.kind, r.metadata.name) not in keys for r in last.spec_set.resources)


def _emptied(root: Path, last: Snapshot | None, before: Mapping[str, FileSig],
             now: Mapping[str, FileSig]) -> list[SpecIssue]:
    """Spec files that are empty now (0 bytes) but had content and declared resources when
    last read. An editor that truncates, then writes, shows exactly that, and the quiet period
    alone cannot tell it from a wish once the writer stalls past it (a loaded machine, a slow
    network disk); an emptied file is never what a person saves to delete something, because
    deleting the file says it plainly. So it is held, naming what it declared, until the file
    is written again or deleted."""
    zeroed = {rel for rel, sig in now.items()
              if sig[2] == 0 and rel in before and before[rel][2] > 0}
    if last is None or not zeroed:
        return []
    declared: dict[str, list[str]] = {}
    for resource in last.spec_set.resources:
        rel = relative_key(root, last.spec_set.source_file(resource))
        if rel in zeroed:
            declared.setdefault(rel, []).append(f"{resource.kind}/{resource.metadata.name}")
    return [SpecIssue(Location(str(root / rel), 0, 0), "-",
                      f"emptied (0 bytes) while it declared {', '.join(names)}; held as a save "
                      "caught between truncate and write, so nothing in it is deleted: write "
                      "it again, or delete the file to delete them", "emptied-file")
            for rel, names in sorted(declared.items())]


def _changed_at(path: Path) -> float:
    try:
        st = path.stat()
    except OSError:
        return time.time()  # vanishing as we look: as fresh as a change can be
    return max(st.st_mtime, st.st_ctime)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)

