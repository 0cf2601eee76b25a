"""Crash-safe file writes.

The daemon can be killed with ``kill -9`` (or lose power) at any instant. A reader must then see
either the old or the new content of a file, never a truncated mix: whole-file writes therefore go
to a temporary file in the same directory (same filesystem, so ``os.replace`` is atomic), are
fsynced, renamed over the target, and the directory is fsynced so the rename itself is durable.

Append-only logs cannot be replaced atomically without rewriting them; for those, one ``write`` of
one line plus fsync bounds the damage of a crash to a torn last line, which readers skip.

Links are never followed inside the state directory: every open uses ``O_NOFOLLOW``, so a
symlink planted in place of ``events.jsonl`` or ``reconciler.log`` cannot make the daemon write
(or truncate) a file elsewhere, and a reader refuses it instead of reading another file. An
atomic replace needs no flag: ``mkstemp`` creates a new file exclusively and ``rename`` replaces
a symlink at the target itself, never what it points to. Non-regular files (directories, FIFOs,
devices) are refused too: reading a FIFO would block a command forever.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from state.diskhealth import WRITES
from state.errors import CorruptState, StateError

P = ParamSpec("P")
R = TypeVar("R")


def reported(write: Callable[Concatenate[Path, P], R]) -> Callable[Concatenate[Path, P], R]:
    """A durable write whose outcome is reported to ``state.diskhealth.WRITES``: a full or
    read-only disk becomes visible (health, metrics) and its recovery is noticed."""

    @wraps(write)
    def wrapper(path: Path, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if not WRITES.watches(path):
            return write(path, *args, **kwargs)
        try:
            result = write(path, *args, **kwargs)
        except OSError as exc:
            WRITES.failed(path.name, exc)
            raise
        except StateError as exc:  # open_private names the file; its cause is the OSError
            if isinstance(exc.__cause__, OSError):
                WRITES.failed(path.name, exc.__cause__)
            raise
        WRITES.succeeded()
        return result

    return wrapper

TEMP_PREFIX = ".tmp-"
"""Prefix of in-flight temporary files; a crash can leave one behind, readers ignore them."""

FILE_MODE = 0o600
"""State may describe hosts and deployments; keep it private to the daemon's user."""

DIR_MODE = 0o700
"""Directories of the state tree, private for the same reason."""

SHARED_WRITE_BITS = 0o022
"""Group or other write permission on the state directory: someone else could plant files."""

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
READ_CHUNK = 1 << 20

_REASONS = {
    errno.ELOOP: "is a symbolic link; state files are never followed through links",
    errno.EISDIR: "is a directory, not a file",
    errno.ENOTDIR: "lies below something that is not a directory",
    errno.EACCES: "cannot be opened: permission denied",
    errno.EPERM: "cannot be opened: operation not permitted",
}


def os_reason(exc: OSError) -> str:
    """A short, human reason for an OSError on a state file (no path: callers name it)."""
    return _REASONS.get(exc.errno or 0) or (exc.strerror or str(exc))


def check_private_dir(path: Path) -> None:
    """StateError unless ``path`` (if it exists) is a directory of ours that nobody else can
    write: anyone who can write the state directory can plant a status, an event or a link."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return  # created with DIR_MODE on first write
    except OSError as exc:
        raise StateError(f"state directory {path}: {os_reason(exc)}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateError(f"state directory {path} is not a directory; remove it or choose "
                         "another --state-dir")
    if info.st_uid != os.geteuid():
        raise StateError(f"state directory {path} is owned by uid {info.st_uid}, not by this "
                         f"user (uid {os.geteuid()}); use a directory of your own or "
                         f"`chown {os.geteuid()} {path}`")
    if info.st_mode & SHARED_WRITE_BITS:
        raise StateError(f"state directory {path} is writable by group or others (mode "
                         f"{stat.S_IMODE(info.st_mode):o}), so anyone could plant state in it; "
                         f"fix it with `chmod 700 {path}`")


def require_regular(fd: int, path: Path) -> os.stat_result:
    """fstat of ``fd``; closes it and raises CorruptState if it is not a regular file."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise CorruptState(path, "is not a regular file")
    return info


def read_file(path: Path, max_bytes: int | None = None) -> bytes | None:
    """The content of ``path``, or None if it does not exist; CorruptState (naming the file)
    for a link, a directory, a FIFO, an unreadable file or one over ``max_bytes``."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptState(path, os_reason(exc)) from None
    info = require_regular(fd, path)
    try:
        if max_bytes is not None and info.st_size > max_bytes:
            raise CorruptState(path, f"is {info.st_size} bytes, more than the {max_bytes} a "
                               "state file may hold")
        chunks = []
        while chunk := os.read(fd, READ_CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise CorruptState(path, os_reason(exc)) from None
    finally:
        os.close(fd)


def open_private(path: Path, flags: int = APPEND_FLAGS) -> int:
    """Open (creating 0600) a state file for writing without following a link; a file an
    older version created with wider permissions is narrowed to 0600. StateError names it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        # The cause is kept for the disk's health (state.diskhealth); the message says it all.
        raise StateError(f"cannot open state file {path}: {os_reason(exc)}") from exc
    info = require_regular(fd, path)
    if stat.S_IMODE(info.st_mode) & ~FILE_MODE:
        try:
            os.fchmod(fd, FILE_MODE)
        except OSError:
            os.close(fd)
            raise
    return fd


def fsync_dir(directory: Path) -> None:
    """Fsync a directory so that entries created or renamed in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes) -> Path:
    """Write ``data`` durably to a temporary file beside ``path`` (same filesystem, so it can be
    renamed or linked into place atomically)."""
    fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX + path.name + ".", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return tmp


@reported
def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file."""
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


@reported
def append_line_durable(path: Path, line: str) -> None:
    """Append ``line`` plus a newline to ``path`` and fsync it.

    The line is written with a single ``write`` on an ``O_APPEND`` descriptor, so concurrent
    appenders never interleave within a line and a crash can only tear the last one.
    """
    if "\n" in line:
        raise ValueError("append_line_durable: line must not contain a newline")
    data = (line + "\n").encode("utf-8")
    created = not os.path.lexists(path)
    fd = open_private(path)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


@reported
def create_exclusive(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` only if it does not exist; return False if it did.

    The content is written and fsynced under a temporary name and then hard-linked into place:
    ``link`` fails if the target exists, so two processes racing to create the file cannot both
    win, and no reader ever sees it half written.
    """
    tmp = _write_temp(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(path.parent)
    return True


def ensure_dir(path: Path, mode: int = DIR_MODE) -> None:
    """Create ``path`` and missing parents with ``mode``, fsyncing each new entry's parent.

    Without the parent fsync a crash could forget a freshly created directory together with
    the files already (durably) written inside it.
    """
    if path.is_dir():
        return
    ensure_dir(path.parent, mode)
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    fsync_dir(path.parent)
