"""One branch of a Git repository (optionally one folder of it), fetched into a mirror and
read as committed snapshots."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import IO

from reconciler.sources.base import (
    Snapshot,
    SourceError,
    wait_either,
)
from reconciler.sources.gitlinks import unread_entries
from specs.errors import SpecError
from specs.loader import (
    DEFAULT_LIMITS,
    LoaderLimits,
)
from specs.trust import NOTHING, TrustPolicy
from specs.validate import load_spec_set
from state.redaction import redact_urls

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
                 limits: LoaderLimits = DEFAULT_LIMITS, trust: TrustPolicy = NOTHING) -> None:
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
        self.trust = trust  # what its specs may read and run: nothing unless the operator says
        self._shown_url = redact_urls(self.url)
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
                spec_set = load_spec_set([target], relative_to=root, limits=self.limits,
                                         trust=self.trust)
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
            wait_either(stop, self._poke, delay)
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
        """Git's complaint in a few lines, the same each time it fails the same way: git and
        ssh write stderr from several processes, so the lines come in another order from one
        poll to the next; sorted and without repeats, a persistent failure reads (and is
        recorded as) one event, not one per poll."""
        text = stderr.decode(errors="replace").replace(self.url, self._shown_url)
        lines = sorted({line.strip() for line in text.splitlines() if line.strip()})
        return " | ".join(lines[:STDERR_LINES])[:STDERR_CHARS]



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
