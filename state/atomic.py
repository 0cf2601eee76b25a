"""Crash-safe file writes.

The daemon can be killed with ``kill -9`` (or lose power) at any instant. A reader must then see
either the old or the new content of a file, never a truncated mix: whole-file writes therefore go
to a temporary file in the same directory (same filesystem, so ``os.replace`` is atomic), are
fsynced, renamed over the target, and the directory is fsynced so the rename itself is durable.

Append-only logs cannot be replaced atomically without rewriting them; for those, one ``write`` of
one line plus fsync bounds the damage of a crash to a torn last line, which readers skip.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_PREFIX = ".tmp-"
"""Prefix of in-flight temporary files; a crash can leave one behind, readers ignore them."""

FILE_MODE = 0o600
"""State may describe hosts and deployments; keep it private to the daemon's user."""

DIR_MODE = 0o700
"""Directories of the state tree, private for the same reason."""


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


def append_line_durable(path: Path, line: str) -> None:
    """Append ``line`` plus a newline to ``path`` and fsync it.

    The line is written with a single ``write`` on an ``O_APPEND`` descriptor, so concurrent
    appenders never interleave within a line and a crash can only tear the last one.
    """
    if "\n" in line:
        raise ValueError("append_line_durable: line must not contain a newline")
    data = (line + "\n").encode("utf-8")
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
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
