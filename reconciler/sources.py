"""Where desired state comes from: a watched folder or a Git branch, read as validated snapshots.

A source answers two questions for the daemon. ``load()`` says *what* is desired: the complete
content of one revision, validated as a whole (``specs.validate``), or a ``SourceError`` that
refuses the revision as a whole; the daemon then keeps its last good snapshot. ``watch()`` only
says *when* to look again: it calls ``changed()`` whenever a new revision may exist and never
passes content along, so a missed or duplicated notification costs at most one extra ``load()``
(the reconcile contract is level-triggered).

Revisions name content exactly: a Git commit SHA, or for a folder ``sha256:<hex>`` over the
sorted (relative path, bytes) of the spec files that ``load()`` reads. Equal revisions mean equal
input, which lets the watchers stay quiet when an editor touches a file without changing it.

Exception tree (defined here):

- ``SourceError``   a revision that cannot be used: its spec issues (``.issues``, located as
                    ``file:line:col``) or a plain reason (the folder is missing, ``git fetch``
                    failed). ``.revision`` names the refused revision when it is known.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, NamedTuple, Protocol

import tenacity
import watchfiles

from controllers.waiting import pause, until
from reconciler.gitlinks import unread_entries
from reconciler.saves import FileSig, ReplacedFiles, relative_key, signature
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
from specs.validate import SpecSet, load_spec_set

# --- folder ------------------------------------------------------------------------------------
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

# --- git ---------------------------------------------------------------------------------------
MIRROR_DIR = "mirror.git"
SNAPSHOTS_DIR = "snapshots"
LOCK_FILE = "lock"
TEMP_PREFIX = ".tmp-"
# Snapshots kept besides the last good one (which the daemon may still be serving from).
KEEP_SNAPSHOTS = 3
# A temp extraction older than this was left by a crash (no extraction takes an hour).
STALE_TEMP_S = 3600.0
# Network operations may be slow but must never hang the daemon; local ones are quick.
GIT_NETWORK_TIMEOUT_S = 120.0
GIT_LOCAL_TIMEOUT_S = 60.0
# A poll is only a hint and holds up stop and poke while it runs: give up on it sooner.
GIT_POLL_TIMEOUT_S = 30.0
# How often a waiting watcher looks at the caller's stop event (it cannot wait on two events).
STOP_CHECK_S = 0.05
# Git's stderr in messages: the end of it, where the reason is, and not a page of it.
STDERR_LINES = 6
STDERR_CHARS = 600
MODE_FILE = "100644"
MODE_EXECUTABLE = "100755"
SHA_NAME = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
MISSING_BRANCH = re.compile(r"couldn't find remote ref", re.IGNORECASE)
# Git's ref-name rules that matter for a branch we put into a refspec (git check-ref-format).
BAD_BRANCH = re.compile(r"(^[-/.])|(\.\.)|([\x00-\x20\x7f~^:?*\[\\])|(@\{)|(//)|([/.]$)|"
                        r"(\.lock$)|(/\.)|(\.lock/)")
# Defaults under the caller's env: no terminal prompt from git, no askpass window from ssh,
# and English messages, which we match on ("couldn't find remote ref").
GIT_BASE_ENV = {"GIT_TERMINAL_PROMPT": "0", "SSH_ASKPASS_REQUIRE": "never", "LC_ALL": "C"}


@dataclass(frozen=True)
class Snapshot:
    """One revision of desired state, validated as a whole.

    File names in ``spec_set`` (and in its issues) resolve against ``root``: ``root / file``
    is the file that was read. For a Git source ``root`` is the snapshot of the whole
    repository, even when only a folder of it was loaded, so names stay repository paths.
    """

    revision: str  # Git SHA, or "sha256:<hex>" digest of a folder's spec files
    spec_set: SpecSet
    root: Path  # folder the files were read from


class SourceError(Exception):
    """A revision that cannot be used; nothing of it is applied.

    ``str()`` lists every issue line (``file:line:col: field: message (rule)``) when there are
    issues, else the plain reason, so the daemon can show it as is.
    """

    def __init__(self, reason: str, issues: Sequence[SpecIssue] = (),
                 revision: str | None = None, reason_code: str = "InvalidRevision") -> None:
        self.reason = reason
        self.issues = list(issues)
        self.revision = revision
        self.reason_code = reason_code  # the Stalled condition's reason
        super().__init__("\n".join(str(i) for i in self.issues) if self.issues else reason)


class Source(Protocol):
    """Where specs come from. ``load`` and ``watch`` may run in different threads."""

    name: str

    def load(self) -> Snapshot:
        """Read the current revision and validate it; raise ``SourceError`` if it is unusable."""
        ...

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        """Block until ``stop`` is set, calling ``changed()`` whenever a new revision may exist."""
        ...

    def poke(self) -> None:
        """Ask the watcher to call ``changed()`` promptly ("look now")."""
        ...


class _EitherEvent:
    """Looks set when any of its events is: watchfiles takes one stop event, we have two
    reasons to leave its loop (the caller stops us, or someone pokes)."""

    def __init__(self, *events: threading.Event) -> None:
        self._events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)


# --- folder ------------------------------------------------------------------------------------

class FolderSource:
    """Spec files under a folder (recursively), watched with inotify through watchfiles.

    Errors name files as ``str(path / relative)``: the real file a person opens to fix it.
    """

    def __init__(self, path: Path, debounce_ms: int = 50, quiet_s: float = QUIET_PERIOD_S,
                 limits: LoaderLimits = DEFAULT_LIMITS) -> None:
        self.path = path
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
            spec_set = load_spec_set([self.path], limits=self.limits)
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
                _wait(stop, self._poke, WATCH_RETRY_S)

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
            step=WATCH_STEP_MS, stop_event=_EitherEvent(stop, self._poke),
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


def _wait(stop: threading.Event, wake: threading.Event, seconds: float) -> None:
    """Wait up to ``seconds`` or until either event is set (looked at every STOP_CHECK_S)."""
    until(lambda: True if stop.is_set() or wake.is_set() else None, timeout_s=seconds,
          pace=STOP_CHECK_S, stop=None)


# --- git ---------------------------------------------------------------------------------------

class _GitFailed(Exception):
    """A git command failed; the message is git's trimmed stderr (or why it could not run)."""


class GitSource:
    """One branch of a Git repository, optionally one folder of it.

    Layout under ``workdir``: ``mirror.git`` (a bare repository we fetch the branch into),
    ``snapshots/<sha>/`` (the committed tree of each loaded revision, complete or absent) and
    ``lock`` (an flock, so a second process on the same workdir waits rather than races git's
    ref locks). Only this branch is fetched: other branches and tags of a big repository are
    not our business.
    """

    def __init__(self, url: str, branch: str, workdir: Path, path: str | None = None,
                 interval_s: float = 30.0, jitter: float = 0.1,
                 env: Mapping[str, str] | None = None,
                 limits: LoaderLimits = DEFAULT_LIMITS) -> None:
        if not branch or BAD_BRANCH.search(branch):
            raise ValueError(f"invalid branch name {branch!r}")
        self.url = _absolute_local(url)
        self.branch = branch
        self.workdir = workdir
        self.path = _repo_subpath(path)
        self.interval_s = interval_s
        self.jitter = min(max(jitter, 0.0), 0.9)
        self.env = _git_env(env)
        self.limits = limits
        self._shown_url = redact_url(self.url)
        self.name = f"git:{self._shown_url}#{branch}" + (f":{self.path}" if self.path else "")
        self._mirror_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._poke = threading.Event()
        # What load() last learned: the branch's SHA (None until a fetch succeeded), whether
        # the last fetch failed, and the last SHA that validated (its snapshot is never pruned).
        self._last_sha: str | None = None
        self._fetch_failed = False
        self._last_good: str | None = None

    # -- load ---------------------------------------------------------------------------------

    def load(self) -> Snapshot:
        with self._mirror_lock, self._process_lock():
            try:
                self._ensure_mirror()
                self._fetch()
                sha = self._resolve()
            except _GitFailed as exc:
                with self._state_lock:
                    self._fetch_failed = True
                raise SourceError(str(exc)) from None
            with self._state_lock:
                self._last_sha, self._fetch_failed = sha, False
            try:
                root = self._materialize(sha)
            except (_GitFailed, OSError) as exc:
                raise SourceError(f"cannot read revision {sha} of {self.name}: {exc}",
                                  revision=sha) from None
            self._prune(keep={sha})
            # Still under the locks: a concurrent load() must not prune what we are reading.
            target = root / self.path if self.path else root
            if not target.is_dir():
                raise SourceError(f"folder {self.path!r} does not exist at revision {sha} of "
                                  f"{self._shown_url}#{self.branch}", revision=sha)
            self._refuse_unread(sha)
            try:
                spec_set = load_spec_set([target], relative_to=root, limits=self.limits)
            except SpecError as exc:
                raise SourceError(f"revision {sha} of {self.name} is invalid", exc.issues,
                                  revision=sha) from None
            with self._state_lock:
                self._last_good = sha
        return Snapshot(revision=sha, spec_set=spec_set, root=root)

    def _ensure_mirror(self) -> None:
        mirror = self.workdir / MIRROR_DIR
        if not (mirror / "HEAD").is_file():
            # `git init` on a half-made repository (a crash during init) completes it.
            self._git(["init", "--quiet", "--bare", str(mirror)], GIT_LOCAL_TIMEOUT_S,
                      git_dir=False)

    def _fetch(self) -> None:
        ref = f"refs/heads/{self.branch}"
        try:
            self._git(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--",
                       self.url, f"+{ref}:{ref}"], GIT_NETWORK_TIMEOUT_S)
        except _GitFailed as exc:
            if MISSING_BRANCH.search(str(exc)):
                raise _GitFailed(f"branch {self.branch!r} does not exist in "
                                 f"{self._shown_url}") from None
            raise _GitFailed(f"cannot fetch branch {self.branch!r} from {self._shown_url}: "
                             f"{exc}") from None

    def _resolve(self) -> str:
        out = self._git(["rev-parse", "--verify", "--quiet",
                         f"refs/heads/{self.branch}^{{commit}}"], GIT_LOCAL_TIMEOUT_S)
        return out.decode().strip()

    def _materialize(self, sha: str) -> Path:
        """The committed tree of ``sha`` as plain files under ``snapshots/<sha>``.

        We read blobs straight from the object store (``ls-tree`` + ``cat-file --batch``)
        rather than ``git archive | tar`` or a checkout: the files are exactly the committed
        bytes (no ``export-subst``/``export-ignore``, no smudge or end-of-line filters, no
        hooks, no index to share between threads), and nothing but plain files and folders is
        created. Symlinks and submodules are skipped: a committed link could point a spec at
        any file on this machine. Extraction goes into a temp folder renamed into place, so a
        ``snapshots/<sha>`` folder that exists is complete and is reused as is.
        """
        snapshots = self.workdir / SNAPSHOTS_DIR
        final = snapshots / sha
        if final.is_dir():
            os.utime(final)  # recently used: the last to be pruned
            return final
        snapshots.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{sha[:12]}-", dir=snapshots))
        try:
            self._extract(sha, temp)
            try:
                os.rename(temp, final)
            except OSError:
                if not final.is_dir():  # else another process finished the same revision
                    raise
        finally:
            shutil.rmtree(temp, ignore_errors=True)  # nothing left there after the rename
        return final

    def _tree(self, sha: str) -> list[tuple[str, str, str, str]]:
        """Every entry of the commit's tree: (mode, kind, object id, path)."""
        listing = self._git(["ls-tree", "-r", "-z", "--full-tree", sha], GIT_LOCAL_TIMEOUT_S)
        entries: list[tuple[str, str, str, str]] = []
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            mode, kind, oid = meta.decode().split(" ")
            entries.append((mode, kind, oid, os.fsdecode(raw_path)))
        return entries

    def _refuse_unread(self, sha: str) -> None:
        """Symlinks and submodules are not materialized (see _materialize). One that may hold
        specs under the loaded folder (see gitlinks.unread_entries) refuses the revision:
        what it holds would otherwise look deleted."""
        prefix = f"{self.path}/" if self.path else ""
        try:
            with self._cat_file() as (stdin, stdout):
                unread = unread_entries(self._tree(sha), prefix,
                                        lambda oid: _read_blob(stdin, stdout, oid))
        except _GitFailed as exc:
            raise SourceError(f"cannot list revision {sha} of {self.name}: {exc}",
                              revision=sha) from None
        if unread:
            raise SourceError(f"revision {sha} of {self.name} has symlinks or submodules that "
                              f"may hold specs: {', '.join(unread)}; they are never read (a "
                              "link could point at any file on this machine), so the revision "
                              "is refused rather than have their resources look deleted",
                              revision=sha)

    def _extract(self, sha: str, into: Path) -> None:
        files: list[tuple[str, str, str]] = []
        for mode, kind, oid, path in self._tree(sha):
            if kind != "blob" or mode not in (MODE_FILE, MODE_EXECUTABLE):
                continue  # symlink (120000) or submodule (commit): see _materialize
            files.append((mode, oid, _safe_relative(path)))
        with self._cat_file() as (stdin, stdout):
            for mode, oid, rel in files:
                data = _read_blob(stdin, stdout, oid, f"for {rel} ")
                target = into / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "xb") as out:
                    out.write(data)
                if mode == MODE_EXECUTABLE:
                    target.chmod(0o755)

    @contextlib.contextmanager
    def _cat_file(self) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
        """``git cat-file --batch``: one process for all blobs; it flushes after each object,
        so a request/answer loop cannot deadlock on full pipes."""
        mirror = self.workdir / MIRROR_DIR
        proc = subprocess.Popen(["git", f"--git-dir={mirror}", "cat-file", "--batch"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=self.env, cwd=self.workdir,
                                start_new_session=True)
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            yield proc.stdin, proc.stdout
        except BaseException:
            _kill_group(proc)  # it may be blocked writing an answer we will never read
            raise
        finally:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=GIT_LOCAL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
            proc.stdout.close()

    def _prune(self, keep: set[str]) -> None:
        """Keep the newest snapshots, the one just loaded and the last good one (the daemon may
        still serve from it while newer revisions are refused); drop stale temp folders."""
        snapshots = self.workdir / SNAPSHOTS_DIR
        with self._state_lock:
            if self._last_good:
                keep = keep | {self._last_good}
        done: list[tuple[float, Path]] = []
        now = time.time()
        for entry in snapshots.iterdir():
            try:
                mtime = entry.stat().st_mtime
            except OSError:
                continue
            if entry.name.startswith(TEMP_PREFIX):
                if now - mtime > STALE_TEMP_S:
                    shutil.rmtree(entry, ignore_errors=True)
            elif SHA_NAME.match(entry.name) and entry.name not in keep:
                done.append((mtime, entry))
        done.sort(reverse=True)
        for _, old in done[max(KEEP_SNAPSHOTS - len(keep), 0):]:
            shutil.rmtree(old, ignore_errors=True)

    @contextlib.contextmanager
    def _process_lock(self) -> Iterator[None]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / LOCK_FILE, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- watch --------------------------------------------------------------------------------

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        """Poll the remote with ``git ls-remote`` (no objects, no lock on the mirror) every
        interval ± jitter; jitter keeps many daemons from polling one server in step."""
        rng = random.Random()
        while not stop.is_set():
            delay = self.interval_s * (1.0 + rng.uniform(-self.jitter, self.jitter))
            _wait(stop, self._poke, delay)
            if stop.is_set():
                return
            if self._poke.is_set():
                self._poke.clear()
                changed()  # "look now": load() fetches
                continue
            if self._may_have_changed():
                changed()

    def poke(self) -> None:
        self._poke.set()

    def remote_sha(self) -> str | None:
        """The branch's SHA at the remote now, or None if the branch does not exist there."""
        ref = f"refs/heads/{self.branch}"
        out = self._git(["ls-remote", "--", self.url, ref], GIT_POLL_TIMEOUT_S,
                        git_dir=False)
        for line in out.decode().splitlines():
            sha, _, name = line.partition("\t")
            if name == ref:
                return sha
        return None

    def _may_have_changed(self) -> bool:
        """True unless the remote provably still has the SHA load() last saw. An unreachable
        remote or a failed last fetch counts as "may have": load() then says what is wrong."""
        try:
            remote = self.remote_sha()
        except _GitFailed:
            return True
        with self._state_lock:
            return self._fetch_failed or remote != self._last_sha

    # -- running git --------------------------------------------------------------------------

    def _git(self, args: list[str], timeout: float, git_dir: bool = True) -> bytes:
        """Run git without a terminal (its own session, stdin closed) so no prompt can wait
        for an answer; kill its whole process group (ssh included) on timeout."""
        cmd = ["git"] + ([f"--git-dir={self.workdir / MIRROR_DIR}"] if git_dir else []) + args
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=self.env, cwd=self.workdir,
                                    start_new_session=True)
        except OSError as exc:
            raise _GitFailed(f"cannot run git: {exc}") from None
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise _GitFailed(f"git {args[0]} timed out after {timeout:g}s") from None
        if proc.returncode != 0:
            raise _GitFailed(self._trim(err) or f"git {args[0]} exited {proc.returncode}")
        return out

    def _trim(self, stderr: bytes) -> str:
        text = stderr.decode(errors="replace").replace(self.url, self._shown_url)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-STDERR_LINES:])[-STDERR_CHARS:]


def redact_url(url: str) -> str:
    """Hide a password or token in ``scheme://user:secret@host``: names end up in status,
    events and logs, which must never hold secrets."""
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)([^/@]*)@", url)
    if not match or ":" not in match.group(2):
        return url
    user = match.group(2).split(":", 1)[0]
    return f"{match.group(1)}{user}:***@{url[match.end():]}"


def _git_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """Our environment minus every inherited GIT_* variable (a GIT_DIR or GIT_WORK_TREE set by
    a hook or a shell would aim our commands at another repository), plus safe defaults, plus
    what the caller gives (e.g. GIT_SSH_COMMAND with a key file and strict known_hosts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_BASE_ENV)
    env.update(extra or {})
    return env


def _absolute_local(url: str) -> str:
    """A local path becomes absolute (git runs with the workdir as its cwd). Git reads
    ``host:path`` (a colon before any slash) as ssh, so we do too."""
    if "://" in url or ":" in url.split("/", 1)[0]:
        return url
    return str(Path(url).expanduser().resolve())


def _repo_subpath(path: str | None) -> str | None:
    """Normalize the folder to load inside the repository; it must stay inside it."""
    if path is None:
        return None
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"path {path!r} must be relative to the repository root, without '..'")
    normal = pure.as_posix()
    return None if normal in ("", ".") else normal


def _safe_relative(path: str) -> str:
    """Refuse tree entries that would leave the snapshot folder (git never writes such trees,
    but the object store is input we did not write)."""
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _GitFailed(f"refusing unsafe path {path!r} in the tree")
    return path


def _read_blob(stdin: IO[bytes], stdout: IO[bytes], oid: str, shown: str = "") -> bytes:
    """One blob through a ``git cat-file --batch`` pipe pair."""
    stdin.write(oid.encode() + b"\n")
    stdin.flush()
    header = stdout.readline().split()
    if len(header) != 3 or header[1] != b"blob":
        raise _GitFailed(f"object {oid} {shown}cannot be read")
    return _read_exact(stdout, int(header[2]) + 1)[:-1]  # blob then a newline


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            raise _GitFailed("git cat-file ended early")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GIT_LOCAL_TIMEOUT_S)
