"""A canary's sources and streams: published by the existing publisher machinery, registered
one stream per source, deleted in one blocking batch and proven gone.

Sources are synthetic colours (``specs.experiment.solid_labels``: one colour each up to 8; at
16 every colour SOLID and with a BLACK border, a colour no label names, so a border answer
cannot be mistaken for another source's) or the spec's checksum-pinned object media. Each is
a distinct source identity with its own publisher and URL: reusing one URL would measure
subscribers, not streams. Stream IDs are deterministic (UUIDv5 of instance, Experiment, run ID,
part and source), so cleanup after a crash finds every stream the run may have created.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from controllers.clients.docker_client import DockerEngine
from controllers.clients.rtvi_client import MAX_BATCH, RtviBusy, RtviClient
from controllers.errors import ControllerError
from controllers.kinds.streamset import plan as streamplan
from controllers.kinds.streamset import publishing
from controllers.kinds.streamset.plan import DesiredSource
from controllers.kinds.streamset.teardown import delete_streams
from controllers.waiting import Stopped
from specs.experiments.base import CanaryPublisher
from specs.experiments.canary import SOLID_COLOURS, CanarySpec, solid_labels
from specs.models import FileSource, PublisherSpec, SourceSpec, SyntheticSource
from state.keys import Key
from state.models import Owner

BORDER_COLOUR = "BLACK"  # contrasts with every canary colour and is no canary label


@dataclass(frozen=True)
class CanarySource:
    name: str
    label: str
    desired: DesiredSource


def canary_sources(canary: CanarySpec) -> list[CanarySource]:
    """The canary's sources, in order, each with the label a correct answer names."""
    found = []
    if canary.media:
        for i, media in enumerate(canary.media, 1):
            spec = SourceSpec(name=f"m{i:02d}", file=FileSource(path=media.path,
                                                               sha256=media.sha256))
            found.append((spec, media.label))
    else:
        for label in solid_labels(canary.streams):
            colour, _, style = label.partition(" ")
            border = BORDER_COLOUR if style == "border" else None
            spec = SourceSpec(name=label.replace(" ", "-"), synthetic=SyntheticSource(
                colour=colour.upper(), border=border))
            found.append((spec, label))
    return [CanarySource(spec.name, label, DesiredSource(
        name=spec.name, kind="file" if spec.file else "synthetic", spec=spec, hash="",
        stream_id="", sensor_name="", description=f"canary source {label}"))
        for spec, label in found]


def numbered_sources(count: int) -> list[CanarySource]:
    """``count`` distinct synthetic sources (``s001``, ``s002``, ...) for load that counts
    streams, not answers: each its own publisher and URL (a distinct source identity), the
    colours and borders cycling so neighbouring sources also differ in content."""
    found = []
    for i in range(count):
        colour = SOLID_COLOURS[i % len(SOLID_COLOURS)]
        border = BORDER_COLOUR if (i // len(SOLID_COLOURS)) % 2 else None
        spec = SourceSpec(name=f"s{i + 1:03d}", synthetic=SyntheticSource(colour=colour,
                                                                         border=border))
        label = f"{colour.lower()} {'border' if border else 'solid'}"
        found.append(CanarySource(spec.name, label, DesiredSource(
            name=spec.name, kind="synthetic", spec=spec, hash="", stream_id="",
            sensor_name="", description=f"load source {spec.name} ({label})")))
    return found


def stream_id(instance: str, resource: Key, run_id: str, part: str, source: str) -> str:
    """The StreamSets' deterministic ID, with the run and its part in the source's place."""
    return streamplan.stream_id(instance, resource, f"{run_id}/{part}/{source}")


def publish(engine: DockerEngine, instance: Owner, resource: Key, run_hash: str, run_id: str,
            sources: list[CanarySource], shape: CanaryPublisher,
            stop: threading.Event) -> dict[str, str]:
    """Start one publisher per source, labelled with the run's ID; source name → RTSP URL (as
    seen on the Host)."""
    publisher = PublisherSpec(width=shape.width, height=shape.height, fps=shape.fps)
    publishing.check_files([s.desired for s in sources], publisher)
    urls = {}
    for src in sources:
        _, url = publishing.start(engine, instance, resource, run_hash, src.desired, publisher,
                                  None, stop, run_id)
        urls[src.name] = url
    return urls


def register(rtvi: RtviClient, ids: dict[str, str], urls: dict[str, str],
             labels: dict[str, str]) -> dict[str, str]:
    """Register one stream per source (batches of 256); source → why it was refused (none
    refused: {}). A stream counts only when RTVI lists it with its own URL."""
    names = list(ids)
    refused: dict[str, str] = {}
    for i in range(0, len(names), MAX_BATCH):
        batch = names[i:i + MAX_BATCH]
        entries = [{"id": ids[n], "liveStreamUrl": urls[n],
                    "description": f"canary {labels[n]}"} for n in batch]
        try:
            result = rtvi.add_streams(entries)
        except RtviBusy as exc:
            refused.update({n: str(exc) for n in batch})
            continue
        by_id = {ids[n]: n for n in batch}
        for err in result.errors:
            if err.id in by_id and not err.duplicate:
                refused[by_id[err.id]] = f"{err.code or err.status} {err.message}".strip()
    listed = {s.id: s.url for s in rtvi.list_streams()}
    for name in names:
        if name not in refused and listed.get(ids[name]) != urls[name]:
            refused[name] = "not listed by RTVI with its URL after registration"
    return refused


def delete_proven(rtvi: RtviClient, ids: list[str], deadline_s: float,
                  stop: threading.Event) -> list[str]:
    """Delete ``ids`` in blocking batches and prove them gone from the listing within
    ``deadline_s``; returns the IDs still listed (each one a failed cleanup)."""
    if not ids:
        return []
    deadline = time.monotonic() + deadline_s
    try:
        return delete_streams(rtvi, ids, max(1, int(deadline_s)), stop, deadline)
    except Stopped:
        raise  # shutting down or stopped early: never mistaken for a stream left behind
    except ControllerError:
        listed = {s.id for s in rtvi.list_streams()}
        return [i for i in ids if i in listed]
