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

Layout: ``base`` (Snapshot, SourceError, the Source protocol), ``folder`` (FolderSource),
``git`` (GitSource), ``saves`` and ``gitlinks`` (what they read with), ``record`` (the
``Source/specs`` record the daemon keeps of them).
"""

from reconciler.sources.base import Snapshot, Source, SourceError
from reconciler.sources.folder import FolderSource, folder_digest, folder_state
from reconciler.sources.git import GitSource

__all__ = ["FolderSource", "GitSource", "Snapshot", "Source", "SourceError", "folder_digest",
           "folder_state"]
