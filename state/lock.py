"""The single-writer lock of a state directory.

Two reconcilers writing one state directory would interleave actions and lose updates, so
``apply`` and the daemon take an exclusive ``flock`` on ``<root>/lock``. ``flock`` belongs to the
kernel's open file description: when the holder exits or is killed with ``-9``, the kernel drops
it, so there is no stale-lock cleanup and no PID-liveness guessing. The PID and start time written
into the file are only for the error message a contender prints.

The lock file is never unlinked: deleting it while another process waits on the old inode would
let two processes each hold "the" lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from types import TracebackType

from state.atomic import DIR_MODE, ensure_dir, open_private
from state.errors import LockHeld, StateError
from state.models import utc_now

LOCK_FILE = "lock"
"""Name of the lock file inside the state directory."""

HOLDER_READ_MAX = 4096
"""Bytes of holder information read from the lock file; more would not be ours."""


def _read_holder(fd: int) -> tuple[int | None, str | None]:
    """PID and start time of the holder, or Nones if it has not written them (yet)."""
    try:
        info = json.loads(os.pread(fd, HOLDER_READ_MAX, 0) or b"{}")
    except (OSError, ValueError):
        return None, None
    if not isinstance(info, dict):
        return None, None
    pid = info.get("pid")
    since = info.get("since")
    return (
        pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        since if isinstance(since, str) else None,
    )


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StateLock:
    """Exclusive, non-blocking lock on a state directory; use as a context manager."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.path = self.root / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object currently holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`LockHeld` naming the current holder at once."""
        if self._fd is not None:
            raise StateError(f"state lock {self.path} is already held by this object")
        ensure_dir(self.root, DIR_MODE)
        # Close-on-exec, so children we spawn don't inherit the lock; O_NOFOLLOW (in
        # open_private), so a symlink planted as the lock file is refused, not written through.
        fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, since = _read_holder(fd)
            os.close(fd)
            raise LockHeld(self.root, pid, since) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            info = json.dumps({"pid": os.getpid(), "since": utc_now()}).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, info, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # closing drops the flock too
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock; a no-op when not held."""
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale holder info for the next reader
        finally:
            os.close(fd)

    def __enter__(self) -> StateLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
