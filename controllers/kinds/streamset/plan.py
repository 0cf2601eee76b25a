"""StreamSet desired state and the pure plan: which sources to publish, register or remove.

Why per-source hashes: "a spec change touches only the sources that changed". Each source's
hash covers exactly what its registration depends on (its own spec, the publisher settings when
it is published, whether VST sits in front), so editing one source, or the caption prompt,
leaves every other registration alone.

Why deterministic stream IDs (UUIDv5 of instance, resource and source name): RTVI streams carry
no labels; a crash between "RTVI created it" and "we recorded it" is recoverable because the next
pass computes the same ID and finds it in the list.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from controllers.actions import Action
from controllers.clients.docker_client import ContainerInfo
from controllers.clients.rtvi_client import StreamInfo
from controllers.clients.vst_client import Sensor
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from specs.models import Deployment, SourceSpec, StreamSet
from state.keys import Key
from state.models import ResourceStatus

KIND_PUBLISHER = "publisher"
KIND_SENSOR = "sensor"
KIND_STREAM = "stream"
STREAM_ID_NAMESPACE = uuid.UUID("5d1f2a6e-8f0b-4c1e-9a43-0e6f6b7c2d10")
SourceKind = Literal["url", "synthetic", "file"]
Verb = Literal["remove", "replace", "publish", "register-sensor", "register"]


def stream_id(instance: str, resource: Key, source: str) -> str:
    return str(uuid.uuid5(STREAM_ID_NAMESPACE, f"{instance}/{resource}/{source}"))


def sensor_name(instance: str, streamset: str, source: str) -> str:
    """The VST sensor name: recognisable in VST's UI, unique per instance."""
    return f"{instance}-{streamset}-{source}"


@dataclass(frozen=True)
class DesiredSource:
    name: str
    kind: SourceKind
    spec: SourceSpec
    hash: str
    stream_id: str
    sensor_name: str
    description: str


@dataclass
class StreamSetDesired:
    streamset: StreamSet
    deployment: Deployment
    resource: Key
    spec_hash: str
    rtvi_url: str  # how this process reaches the Deployment's service
    publisher_host: str
    vst_url: str | None
    sources: dict[str, DesiredSource]
    source_file: str


@dataclass
class StreamSetObserved:
    streams: dict[str, StreamInfo]  # by stream ID
    sensors: dict[str, Sensor] | None  # by sensor ID; None without VST
    publishers: dict[str, ContainerInfo]  # by source name


def source_action(verb: Verb, source: str, cause: str) -> Action:
    """An action on one source of a StreamSet."""
    return Action(verb, f"source {source}", cause, item=source)


@dataclass
class StreamPlan:
    resource: Key
    actions: list[Action] = field(default_factory=list)
    conflict: str | None = None
    # RTVI's streams as the plan saw them: a pass that acts on this plan without removing
    # anything first needs not list them again (None: a plan made without asking RTVI).
    listed: dict[str, StreamInfo] | None = None
    # The record the plan was made from (this pass's own copy): a pass with nothing to change
    # compares its desired fields with it instead of reading the record again.
    record: ResourceStatus | None = None

    @property
    def changes(self) -> bool:
        return bool(self.actions)

    def verbs(self, source: str) -> set[str]:
        return {a.verb for a in self.actions if a.item == source}


def desired_sources(ss: StreamSet, instance: str) -> dict[str, DesiredSource]:
    resource = Key("StreamSet", ss.metadata.name)
    publisher = ss.spec.publisher.model_dump(mode="json", exclude={"host"})
    # A moved VST or publisher Host re-creates the source there (and removes the old one where
    # the inventory says it lives), so both are part of the source's hash.
    out: dict[str, DesiredSource] = {}
    for src in ss.spec.sources:
        kind: SourceKind = ("url" if src.url is not None else
                            "synthetic" if src.synthetic is not None else "file")
        vst = ss.spec.vst.url if ss.spec.vst is not None else None
        body: dict[str, Any] = {"source": src.model_dump(mode="json", exclude_defaults=True),
                                "vst": vst}
        if kind != "url":
            body["publisher"] = publisher
            body["publisherHost"] = ss.spec.publisher.host
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
        out[src.name] = DesiredSource(
            name=src.name, kind=kind, spec=src, hash=digest,
            stream_id=stream_id(instance, resource, src.name),
            sensor_name=sensor_name(instance, ss.metadata.name, src.name),
            description=src.description or f"{ss.metadata.name} {src.name}")
    return out


def recorded_sources(record: ResourceStatus | None) -> dict[str, SourceFacts]:
    """Each source's recorded facts, by name (none for no record)."""
    return StreamSetStatusFacts.of(record).sources


def plan_streamset(desired: StreamSetDesired, observed: StreamSetObserved,
                   record: ResourceStatus | None) -> StreamPlan:
    """Pure: what makes RTVI, VST and the publishers match the spec, each with its cause."""
    result = StreamPlan(desired.resource, listed=observed.streams, record=record)
    recorded = recorded_sources(record)
    owned = {item.name for item in record.inventory} if record is not None else set()
    for name in sorted((owned | set(recorded)) - set(desired.sources)):
        result.actions.append(source_action("remove", name, f"source {name} is no longer in the "
                                                           "spec"))
    for name, src in desired.sources.items():
        rec = recorded.get(name)
        # No hash yet: an earlier pass stopped before registering it; repair, not replace.
        if rec is not None and rec.hash not in (None, src.hash):
            result.actions.append(source_action("replace", name, _changed(rec, src)))
            continue
        result.actions.extend(_repairs(desired, observed, record, src))
    return result


def _changed(rec: SourceFacts, src: DesiredSource) -> str:
    old = rec.spec
    new = src.spec.model_dump(mode="json", exclude_defaults=True)
    if old is None:
        return f"source {src.name} changed"
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return f"source {src.name} changed ({', '.join(keys) or 'publisher or VST settings'})"


def _repairs(desired: StreamSetDesired, observed: StreamSetObserved,
             record: ResourceStatus | None, src: DesiredSource) -> list[Action]:
    actions = []
    if src.kind != "url":
        pub = observed.publishers.get(src.name)
        if pub is None:
            actions.append(source_action("publish", src.name, "no publisher container"
                                        if _known(record, KIND_PUBLISHER, src.name)
                                        else "new source"))
        elif not pub.running:
            actions.append(source_action("publish", src.name, f"publisher {pub.name} is "
                                        f"{pub.status} (exit code {pub.exit_code})"))
    if observed.sensors is not None:
        item = record.inventory_item(KIND_SENSOR, src.name) if record is not None else None
        if item is None:
            actions.append(source_action("register-sensor", src.name, "not registered with VST"))
        elif item.id is None:
            actions.append(source_action("register-sensor", src.name, "VST registration "
                                        "unconfirmed (a pass stopped mid-way): adopt the sensor "
                                        "by name, or register it"))
        elif item.id not in observed.sensors:
            actions.append(source_action("register-sensor", src.name, f"VST sensor {item.id} is "
                                        "gone"))
    if src.stream_id not in observed.streams:
        cause = (f"stream {src.stream_id} is no longer registered with RTVI"
                 if _known(record, KIND_STREAM, src.name) else "new source")
        actions.append(source_action("register", src.name, cause))
    return actions


def _known(record: ResourceStatus | None, kind: str, name: str) -> bool:
    return record is not None and record.inventory_item(kind, name) is not None
