"""Exceptions raised by the durable store.

Every failure of the state package derives from :class:`StateError`, so callers (the CLI, the
engine) can catch one type and print its message; the message is written for a person, not a
stack trace.

Tree::

    StateError          base: misuse or an unusable state directory (bad instance name,
                        instance mismatch, a resource name that would escape the directory)
    +-- LockHeld        another live process holds the single-writer lock
    +-- CorruptState    a file in the state directory cannot be parsed
    +-- StateFenced     a replica's write without its lease (etcd): refused, nothing written
"""

from __future__ import annotations

from pathlib import Path


class StateError(Exception):
    """Base of all state errors; also raised directly for refused or invalid input."""


class LockHeld(StateError):
    """The single-writer lock of a state directory is held by another process.

    ``pid`` and ``since`` come from the lock file and are ``None`` when the holder has not
    written them yet (it is between ``flock`` and its write) or wrote something unreadable.
    """

    def __init__(self, path: Path, pid: int | None = None, since: str | None = None) -> None:
        self.path = path
        self.pid = pid
        self.since = since
        holder = f"reconciler pid {pid}" if pid is not None else "another reconciler process"
        when = f" (since {since})" if since else ""
        super().__init__(
            f"state directory {path} is locked by {holder}{when}; "
            "another apply or daemon is running"
        )


class CorruptState(StateError):
    """A file in the state directory holds something that does not parse.

    The store writes through ``write_atomic``, so this means outside interference (a hand edit,
    a disk fault); the message names the file so a person can inspect or remove it.
    """

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"corrupt state file {path}: {reason}")


class StateFenced(StateError):
    """A replica acted without its lease (expired, or a share now held by another): nothing
    was written, and it must not act until it holds the share again."""
