"""Which entries of a committed tree a Git source cannot read, and so must refuse.

The Git source materializes only regular files: a committed symlink could point a spec at any
file on the machine, and a submodule's files are not in the commit. Skipping them silently is
not safe either: whatever they held would look deleted, and the daemon would prune it. So an
entry that *may* hold specs refuses the revision. Kept pure (entries and a blob reader in, paths
out) so the rule is tested without a repository.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from specs.loader import SPEC_SUFFIXES

MODE_SYMLINK = "120000"

# (mode, kind, object id, path) as `git ls-tree -r` lists it.
TreeEntry = tuple[str, str, str, str]


def unread_entries(entries: Iterable[TreeEntry], prefix: str,
                   read_blob: Callable[[str], bytes]) -> list[str]:
    """Paths under ``prefix`` that may hold specs but will not be read.

    A submodule always may. A symlink may when its name is a spec name, when it has no suffix
    (folders usually have none), or when its target is a folder of the commit or lies outside
    the commit where nobody can tell (``team.v2 -> ../teams/v2``). A link to a file of the
    commit with a non-spec name (``README.md -> docs/README.md``) is harmless and allowed.
    """
    listed = list(entries)
    folders = {str(parent) for *_, path in listed for parent in PurePosixPath(path).parents}
    files = {path for mode, kind, _, path in listed if kind == "blob" and mode != MODE_SYMLINK}
    unread: list[str] = []
    for mode, kind, oid, path in listed:
        if not path.startswith(prefix):
            continue
        submodule = kind == "commit"
        if submodule or (mode == MODE_SYMLINK
                         and _may_hold_specs(path, oid, folders, files, read_blob)):
            unread.append(path)
    return unread


def _may_hold_specs(path: str, oid: str, folders: set[str], files: set[str],
                    read_blob: Callable[[str], bytes]) -> bool:
    if PurePosixPath(path).suffix in (*SPEC_SUFFIXES, ""):
        return True
    target = read_blob(oid).decode("utf-8", "surrogateescape")
    if target.startswith("/"):
        return True  # outside the commit: cannot tell a file from a folder
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return True
    return resolved in folders or resolved not in files
