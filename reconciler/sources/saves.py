"""Which saves a folder source may trust at once: a spec file renamed over an existing one.

The folder source waits a quiet period before it trusts what it reads, because an editor that
truncates a file and then writes it shows a half-written (often valid, shorter) file for a
moment, and acting on that deletes what the missing half declared. A file *renamed over* an
existing spec cannot be caught half-written: rename is atomic, so its content is whole the
moment it appears. Safe writes do exactly that (``sed -i``, Ansible, JetBrains' safe write, any
tool that writes a temporary file and renames it), and for them the quiet period only delays
the action.

The watcher tells the kinds of save apart by the events watchfiles reports for a batch:

- renamed over an existing file: ``added`` for the path, and no ``deleted`` for it;
- written in place (truncate, then write): ``modified``;
- unlinked, then created and written (vim's and emacs' backup dance, ``git checkout``): a
  ``deleted`` beside the ``added``, or in an earlier batch; so a path deleted since the last
  snapshot is not trusted until a snapshot has read it again.

A new file (a path the last snapshot did not have) is never trusted: a file being created and
written shows the same ``added``. What the watcher saw is kept as each file's signature
(device, inode, size, mtime, ctime) taken after the event; a file is trusted only while it still
has that signature *and* a different inode from the one last read at its path. A write after the
rename, even one whose event has not arrived yet, changes the signature, and so brings the quiet
period back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping

import watchfiles

# (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): equal signatures mean the same inode,
# untouched since; a different inode at the same path means the file was replaced.
FileSig = tuple[int, int, int, int, int]


def signature(path: str | os.PathLike[str]) -> FileSig | None:
    """The file's signature, or None when it cannot be looked at (gone, unreadable folder)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def relative_key(root: str | os.PathLike[str], path: str) -> str | None:
    """``path`` relative to ``root`` in the form folder_state uses, or None when it is outside."""
    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:
        return None
    if rel == os.curdir or rel.startswith(os.pardir):
        return None
    return rel.replace(os.sep, "/")


class ReplacedFiles:
    """What the watcher saw renamed into place, checked against what load() reads.

    ``observe`` runs in the watcher's thread, ``explains`` in whichever thread loads.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._renamed: dict[str, FileSig] = {}  # relative path -> signature after its rename
        self._gone: dict[str, int] = {}  # relative path -> batch number it was deleted in
        self._batches = 0

    def observe(self, batch: Iterable[tuple[watchfiles.Change, str]]) -> None:
        """Record one batch of events: a rename over a path is remembered, anything else that
        touched a path forgets it."""
        changes = list(batch)
        deleted = {path for change, path in changes if change == watchfiles.Change.deleted}
        with self._lock:
            self._batches += 1
            for change, path in changes:
                key = relative_key(self._root, path)
                if key is None:
                    continue
                if path in deleted:
                    self._gone[key] = self._batches
                sig = signature(path) if change == watchfiles.Change.added else None
                if sig is not None and path not in deleted:
                    self._renamed[key] = sig
                else:
                    self._renamed.pop(key, None)

    def mark(self) -> int:
        """Taken before load() reads the folder; hand it to ``read`` once the read is used."""
        with self._lock:
            return self._batches

    def read(self, mark: int) -> None:
        """A snapshot read the folder after ``mark``: deletions seen before it are in it."""
        with self._lock:
            self._gone = {key: n for key, n in self._gone.items() if n > mark}

    def explains(self, before: Mapping[str, FileSig], now: Mapping[str, FileSig]) -> bool:
        """True when every difference between two readings of the folder (relative path ->
        signature) is a file renamed over one that was there: the same files, and each one
        that differs is still exactly as the watcher saw it right after its rename."""
        if before.keys() != now.keys():
            return False  # a file came or went: creation and unlinking are not atomic saves
        with self._lock:
            for key, sig in now.items():
                old = before[key]
                if sig == old:
                    continue
                if key in self._gone or self._renamed.get(key) != sig or sig[:2] == old[:2]:
                    return False
        return True
