"""Finished runs' evidence bundles kept in etcd, so ``evidence RUN_ID`` works from any machine.

A run's bundle is written to a folder on the machine that ran or followed it (its
``evidenceRoot``). With the records in etcd, another machine (an operator's laptop, the replica
that took the Host over) must read it too. Once a run is terminal its folder is packed
(tar.gz of its files and folders; links left out) and stored as chunks under
``<prefix>bundles/<runId>/<n, 6 digits>``; ``<prefix>bundles/<runId>/meta`` (chunk count, size,
SHA-256 of the archive) is written last, so a bundle without it is incomplete and never read.
Chunks stay under etcd's request limit (1.5 MiB by default). Reading checks the SHA-256 and
unpacks with tarfile's ``data`` filter (no links out, no devices, no absolute paths) into a
fresh folder; ``evidence --verify`` then checks every file against the bundle's own
``checksums.sha256``.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

from state.errors import StateError
from state.etcdgw import Compare, EtcdGateway, Put
from state.evidence import RUN_ID_RE

CHUNK_BYTES = 768 * 1024
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
META = "meta"


def _folder(prefix: str, run_id: str) -> str:
    """The bundle's keys; StateError for what is not a run ID (it names a folder too)."""
    if not RUN_ID_RE.fullmatch(run_id):
        raise StateError(f"{run_id!r} is not a run ID")
    return f"{prefix}bundles/{run_id}/"


def publish(gateway: EtcdGateway, prefix: str, run_id: str, folder: Path,
            guards: list[Compare]) -> bool:
    """Store ``folder`` as run ``run_id``'s bundle unless it is stored already; False when
    there was nothing to store (no folder) or it already was. StateError: too big, or not
    written (``guards`` failed: nothing is stored)."""
    base = _folder(prefix, run_id)
    if gateway.get(base + META) is not None or not folder.is_dir():
        return False
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        # Files and folders only: a link (never followed) is not part of a bundle, whose
        # checksums name regular files; one planted there must not travel.
        tar.add(folder, arcname=run_id,
                filter=lambda info: info if info.isreg() or info.isdir() else None)
    data = packed.getvalue()
    if len(data) > MAX_BUNDLE_BYTES:
        raise StateError(f"the evidence of run {run_id} packs to {len(data)} bytes, more than "
                         f"{MAX_BUNDLE_BYTES} kept in etcd: read it in {folder}")
    chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    for n, chunk in enumerate(chunks):
        if not gateway.txn(guards, [Put(f"{base}{n:06d}", chunk)]).succeeded:
            raise StateError(f"the evidence of run {run_id} was not stored: this replica "
                             "no longer holds its lease")
    meta = json.dumps({"chunks": len(chunks), "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()}).encode()
    # False: another replica stored it meanwhile (or the guard failed)
    return gateway.txn([*guards, Compare.absent(base + META)], [Put(base + META, meta)]
                       ).succeeded


def fetch(gateway: EtcdGateway, prefix: str, run_id: str, into: Path) -> Path | None:
    """Run ``run_id``'s bundle unpacked as ``into/<run_id>`` (replaced), or None when etcd
    keeps none; StateError when what it keeps is damaged."""
    base = _folder(prefix, run_id)
    meta_kv = gateway.get(base + META)
    if meta_kv is None:
        return None
    try:
        meta = json.loads(meta_kv.value)
        count, digest = int(meta["chunks"]), str(meta["sha256"])
    except (ValueError, KeyError, TypeError):
        raise StateError(f"the stored evidence of run {run_id} has an unreadable "
                         f"description ({base}{META})") from None
    found = {kv.key: kv.value for kv in gateway.scan(base) if kv.key != base + META}
    parts = [found.get(f"{base}{n:06d}") for n in range(count)]
    data = b"".join(p for p in parts if p is not None)
    if None in parts or hashlib.sha256(data).hexdigest() != digest:
        raise StateError(f"the stored evidence of run {run_id} is damaged (chunks missing or "
                         "changed: its SHA-256 does not match); nothing was unpacked")
    target = into / run_id
    shutil.rmtree(target, ignore_errors=True)
    into.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise StateError(f"the stored evidence of run {run_id} cannot be unpacked: "
                         f"{exc}") from None
    return target if target.is_dir() else None
