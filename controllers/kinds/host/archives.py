"""Images for Hosts that reach no registry: ``docker save`` archives on the reconciler's machine.

An archive's ``manifest.json`` lists each image it holds by its config (whose digest is the
image's ID) and its tags. A reference pinned by digest is found by that ID (the convention
for images built or loaded without a registry, which have no registry digest); a tag by its
tag. The archive is streamed to the Host's engine through the API (``POST /images/load``),
so an ``ssh://`` Host loads it over its tunnel; nothing is copied to the Host's disk first.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass

from specs.images import ImageRef

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 4 << 20


@dataclass(frozen=True)
class Held:
    """One image of an archive."""

    image_id: str  # sha256:<hex> of its config
    tags: tuple[str, ...]


def images_in(path: str) -> list[Held]:
    """The images ``path`` holds ([] when it is no readable ``docker save`` archive: the
    caller names the archives it looked in)."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            member = tar.getmember(MANIFEST)
            if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
                return []
            data = tar.extractfile(member)
            entries = json.loads(data.read()) if data is not None else []
    except (OSError, KeyError, tarfile.TarError, ValueError):
        return []
    found = []
    for entry in entries if isinstance(entries, list) else []:
        config = str(entry.get("Config") or "") if isinstance(entry, dict) else ""
        digest = config.rsplit("/", 1)[-1].removesuffix(".json")
        if len(digest) == 64:
            tags = entry.get("RepoTags") or []
            found.append(Held("sha256:" + digest, tuple(str(t) for t in tags)))
    return found


def archive_holding(paths: list[str], ref: ImageRef) -> str | None:
    """The first archive of ``paths`` that holds ``ref``'s image."""
    wanted_tags = {ref.text, f"{ref.name}:{ref.tag or 'latest'}"}
    for path in paths:
        for held in images_in(path):
            if ref.digest is not None and held.image_id == ref.digest:
                return path
            if ref.digest is None and wanted_tags & set(held.tags):
                return path
    return None
