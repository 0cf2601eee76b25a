"""sha256 of media files, and the one message a mismatch is reported with.

Why shared (stdlib only): the controller checks a pinned file before it creates a publisher, and
the publisher app checks again inside its container (the file it sees may differ, e.g. on a remote
Host). Both must say the same thing so a person sees one message whichever side caught it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK_BYTES = 1 << 20


def file_sha256(path: str | Path) -> str:
    """Lower-case hex sha256 of a file's content, read in chunks (media files can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def normalise_sha256(text: str) -> str:
    """Accept ``sha256:<hex>`` as well as bare hex; compare in lower case."""
    value = text.strip().lower()
    return value.removeprefix("sha256:")


def mismatch_message(path: str | Path, expected: str, got: str) -> str:
    return f"sha256 mismatch for {path}: expected {normalise_sha256(expected)}, got {got}"
