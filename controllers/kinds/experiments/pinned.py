"""Files an experiment sends as they were pinned: read whole, checked against their sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path


class MediaError(Exception):
    """A pinned file that cannot be read or no longer matches its checksum."""


def read_pinned(path: str, sha256: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise MediaError(f"{path}: cannot read: {exc.strerror or exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise MediaError(f"{path}: sha256 is {digest}, the spec pins {sha256}")
    return data
