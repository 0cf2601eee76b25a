"""The container for one published source of a StreamSet, and the URL it is served on.

Why one container per source: sources start, fail, restart and are pruned one by one, each with
its own labels, and a crash of one decoder never takes its siblings down.

Why an engine-assigned port on 127.0.0.1: nothing off the machine can reach the stream, and
concurrent StreamSets (or test runs) never race for a fixed port; the URL is read back from the
engine after start.

Why the sha256 is checked here as well as in the app: when the pinned file is readable on this
machine a mismatch is refused before anything is created (a Stalled StreamSet with a clear
message, no crash-looping container); the app's own check covers files that only the Docker
host can see.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from controllers.clients.docker_client import ContainerRequest, DockerEngine
from controllers.errors import PermanentError, TemporaryError
from controllers.kinds.streamset.digest import file_sha256, mismatch_message, normalise_sha256
from controllers.kinds.streamset.publisher.image import CONTAINER_PORT
from controllers.ownership import LABEL_SOURCE, container_name, labels_for
from controllers.waiting import until
from state.keys import Key
from state.models import Owner

PORT_KEY = f"{CONTAINER_PORT}/tcp"
LOOPBACK = "127.0.0.1"
MEDIA_DIR = "/media"
STOP_TIMEOUT_S = 5  # the app exits on SIGTERM at once; this only bounds a wedged one
POLL_S = 0.05
_NAME_UNSAFE = re.compile(r"[^a-z0-9_.-]+")


class MediaMismatch(PermanentError):
    """A pinned media file does not have the pinned sha256."""


@dataclass(frozen=True)
class PublishedSource:
    """One published source as the StreamSet spec describes it."""

    name: str
    kind: Literal["colour", "file"]
    colour: str | None = None
    border: str | None = None
    file: Path | None = None
    sha256: str | None = None
    width: int = 320
    height: int = 240
    fps: int = 10
    path: str = "/stream"

    def environment(self) -> dict[str, str]:
        """The app's configuration (documented in ``controllers.kinds.streamset.publisher.app``)."""
        env = {"PUBLISH_KIND": self.kind, "PUBLISH_WIDTH": str(self.width),
               "PUBLISH_HEIGHT": str(self.height), "PUBLISH_FPS": str(self.fps),
               "PUBLISH_PATH": self.path}
        optional = {"PUBLISH_COLOUR": self.colour, "PUBLISH_BORDER": self.border,
                    "PUBLISH_FILE": self.media_target, "PUBLISH_SHA256": self.sha256}
        env.update({key: value for key, value in optional.items() if value})
        return env

    @property
    def media_target(self) -> str | None:
        return None if self.file is None else f"{MEDIA_DIR}/{self.file.name}"


def publisher_name(instance: str, resource: Key, source: str) -> str:
    """``rtvi-[<instance>-]pub-<resource name>-<source>``, Docker-name safe."""
    stem = _NAME_UNSAFE.sub("-", f"pub-{resource.rsplit('/', 1)[-1]}-{source}".lower())
    return container_name(instance, stem.strip("-"))


def publisher_request(instance: Owner, resource: Key, spec_hash: str, source: PublishedSource,
                      image_id: str, host_port: int | None = None,
                      run_id: str | None = None) -> ContainerRequest:
    """Create-ready request: our labels plus the source label, init, port 8554 on 127.0.0.1
    (``host_port``, or one the engine assigns), and the media file bind-mounted read-only.
    An Experiment's publisher also carries its run's ``run_id`` label, as the perf field guide
    asks of every container of a run (so one filter finds, and cleans up, all of them)."""
    labels = labels_for(instance, resource, spec_hash, run_id=run_id)
    labels[LABEL_SOURCE] = source.name
    mounts = []
    if source.file is not None and source.media_target is not None:
        mounts.append((str(source.file), source.media_target, True))
    return ContainerRequest(
        name=publisher_name(instance, resource, source.name), image=image_id, labels=labels,
        environment=source.environment(), ports={PORT_KEY: (LOOPBACK, host_port)}, mounts=mounts,
        reads=[("media", source_path) for source_path, _, _ in mounts],
        init=True, stop_timeout=STOP_TIMEOUT_S,
    )


def check_media(source: PublishedSource) -> None:
    """Refuse a pinned file whose content differs, when this machine can read it."""
    if source.file is None or source.sha256 is None:
        return
    if not os.access(source.file, os.R_OK):
        return  # only the Docker host sees it: the app checks inside the container
    got = media_sha256(source.file)
    if got != normalise_sha256(source.sha256):
        raise MediaMismatch(mismatch_message(source.file, source.sha256, got))


def media_sha256(path: str | Path) -> str:
    """sha256 of a media file, read once per version of the file.

    Every plan of a StreamSet checks its pinned files; re-reading a few GiB of video each pass
    would make a no-op cost seconds. A file is identified by where it is and by its stat
    (device, inode, size, mtime and ctime, in ns): any write changes ctime, so new content is
    always hashed again, while an unchanged file costs one ``stat``."""
    info = os.stat(path)
    return _sha256_of(os.path.abspath(path), info.st_dev, info.st_ino, info.st_size,
                      info.st_mtime_ns, info.st_ctime_ns)


@functools.lru_cache(maxsize=512)
def _sha256_of(path: str, dev: int, inode: int, size: int, mtime_ns: int,
               ctime_ns: int) -> str:
    return file_sha256(path)


def start_publisher(engine: DockerEngine, instance: Owner, resource: Key, spec_hash: str,
                    source: PublishedSource, image_id: str, host_port: int | None = None,
                    run_id: str | None = None) -> str:
    """Check the media, create and start the publisher; returns the container ID."""
    check_media(source)
    container_id = engine.create(publisher_request(instance, resource, spec_hash, source,
                                                   image_id, host_port, run_id))
    engine.start(container_id)
    return container_id


def publisher_url(engine: DockerEngine, container: str, path: str = "/stream") -> str | None:
    """``rtsp://127.0.0.1:<assigned port><path>``, or None while no port is assigned."""
    port = engine.host_port(container, PORT_KEY)
    return None if port is None else f"rtsp://{LOOPBACK}:{port}{path}"


def wait_for_url(engine: DockerEngine, container: str, path: str = "/stream",
                 timeout_s: float = 10.0, stop: threading.Event | None = None) -> str:
    """Poll until the engine reports the assigned port; a container that exits first (bad
    config, sha256 mismatch) is a Permanent error carrying the last line of its log."""
    def assigned() -> str | None:
        url = publisher_url(engine, container, path)
        if url is not None:
            return url
        info = engine.container(container)
        if info is not None and info.status in ("exited", "dead"):
            last = (engine.logs(container, tail=5).strip().splitlines() or ["no output"])[-1]
            raise PermanentError(f"publisher {info.name} exited with code {info.exit_code}: "
                                 f"{last}")
        return None
    url = until(assigned, timeout_s=timeout_s, pace=POLL_S, stop=stop)
    if url is None:
        raise TemporaryError(f"publisher {container}: no host port after {timeout_s:.0f} s")
    return url
