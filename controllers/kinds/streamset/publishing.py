"""Published sources as the StreamSet controller sees them: start, find, remove.

Why a seam between ``controllers.kinds.streamset.publisher`` (image, app, container request) and the
StreamSet controller: the controller speaks in spec terms (a source, its publisher settings, the
port it had before), the publisher package in container terms. Keeping the host port across a
restart of the publisher keeps its URL, so VST and RTVI registrations survive a publisher that
crashed.
"""

from __future__ import annotations

import threading
from pathlib import Path

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo, DockerEngine
from controllers.errors import ControllerError, PermanentError
from controllers.kinds.host.hostview import HostView
from controllers.kinds.streamset.plan import DesiredSource
from controllers.kinds.streamset.publisher.image import ensure_publisher_image
from controllers.kinds.streamset.publisher.run import (
    PublishedSource,
    check_media,
    publisher_name,
    start_publisher,
    wait_for_url,
)
from specs.models import PublisherSpec
from state.keys import Key
from state.models import InventoryItem, Owner

STOP_GRACE_S = 5
_images: dict[int, str] = {}  # id(engine) → publisher image ID (planning it costs seconds)
_images_lock = threading.Lock()


def publisher_image(engine: DockerEngine) -> str:
    """The publisher image on ``engine``, built once per engine per process (the root-fs
    plan behind the content hash runs ``ldd`` over hundreds of files)."""
    with _images_lock:
        image = _images.get(id(engine))
        if image is None or engine.image(image) is None:
            image = _images[id(engine)] = ensure_publisher_image(engine)
        return image


def use_publisher_image(engine: DockerEngine, image_id: str) -> None:
    """Use ``image_id`` as the publisher image on ``engine``: a run executing as a job on its
    Host has no GStreamer to build one from; the reconciler put it there first."""
    with _images_lock:
        _images[id(engine)] = image_id


def published(src: DesiredSource, publisher: PublisherSpec) -> PublishedSource:
    spec = src.spec
    if spec.synthetic is not None:
        return PublishedSource(name=src.name, kind="colour", colour=spec.synthetic.colour,
                               border=spec.synthetic.border, width=publisher.width,
                               height=publisher.height, fps=publisher.fps)
    assert spec.file is not None
    return PublishedSource(name=src.name, kind="file", file=Path(spec.file.path),
                           sha256=spec.file.sha256, width=publisher.width,
                           height=publisher.height, fps=publisher.fps)


def check_files(sources: list[DesiredSource], publisher: PublisherSpec) -> None:
    """Refuse the whole set if any pinned media file differs: nothing is published then."""
    for src in sources:
        if src.kind == "file":
            check_media(published(src, publisher))


def publishers_in(view: HostView, instance: Owner, resource: Key) -> dict[str, ContainerInfo]:
    """Our publisher containers of one StreamSet, by source name, from the Host's shared view
    (is_owned drops another state directory's publishers of the same name)."""
    return {c.labels[ownership.LABEL_SOURCE]: c for c in view.containers.values()
            if ownership.LABEL_SOURCE in c.labels
            and ownership.is_owned(c.labels, instance, resource)}


def running_url(engine: DockerEngine, view: HostView, instance: Owner, resource: Key,
                spec_hash: str, src: DesiredSource, publisher: PublisherSpec,
                stop: threading.Event | None = None) -> tuple[ContainerInfo, str] | None:
    """Our running publisher of ``src`` started for this very spec (its labels say so), and
    its URL; None when there is none (a record lost: adopt it rather than start another)."""
    running = publishers_in(view, instance, resource).get(src.name)
    if (running is None or not running.running
            or running.labels.get(ownership.LABEL_SPEC_HASH) != spec_hash):
        return None
    return running, wait_for_url(engine, running.id, published(src, publisher).path, stop=stop)


def start(engine: DockerEngine, instance: Owner, resource: Key, spec_hash: str,
          src: DesiredSource, publisher: PublisherSpec,
          port: int | None, stop: threading.Event | None = None,
          run_id: str | None = None) -> tuple[str, str]:
    """(Re)create the publisher of ``src``, on ``port`` when given (its previous port), labelled
    with an Experiment's ``run_id`` when given; returns (container ID, URL). Raises
    PermanentError on a foreign container."""
    source = published(src, publisher)  # its media was checked by the plan of this pass
    name = publisher_name(instance, resource, src.name)
    existing = engine.container(name)
    if existing is not None:
        if not ownership.is_owned(existing.labels, instance, resource):
            raise PermanentError(f"a container named {name} already exists and is not ours "
                                 f"({ownership.why_not_ours(existing.labels, instance)}); it "
                                 "is left untouched")
        engine.stop(existing.id, STOP_GRACE_S)
        engine.remove(existing.id)
    container_id = start_publisher(engine, instance, resource, spec_hash, source,
                                   publisher_image(engine), port, run_id)
    return container_id, wait_for_url(engine, container_id, source.path, stop=stop)


def remove(engine: DockerEngine, instance: Owner, resource: Key,
           item: InventoryItem) -> str | None:
    """Remove one publisher we own; None when gone, else why it was left."""
    try:
        info = engine.container(item.id) if item.id else engine.container(
            publisher_name(instance, resource, item.name))
        if info is None:
            return None
        if not ownership.is_owned(info.labels, instance, resource):
            return f"publisher {info.name} is not ours (labels differ); left untouched"
        engine.stop(info.id, STOP_GRACE_S)
        engine.remove(info.id)
    except ControllerError as exc:
        return f"publisher {item.name} not removed ({exc})"
    return None
