"""The StreamSet plan is a pure function: only the sources that changed get actions."""

from __future__ import annotations

from typing import Any

from controllers.clients.docker_client import ContainerInfo
from controllers.clients.rtvi_client import StreamInfo
from controllers.kinds.streamset.plan import (
    KIND_PUBLISHER,
    KIND_STREAM,
    StreamSetDesired,
    StreamSetObserved,
    desired_sources,
    plan_streamset,
    stream_id,
)
from specs.validate import parse_text, spec_hash
from state.keys import Key
from state.models import InventoryItem, ResourceStatus

INSTANCE = "default"
CAMS = Key("StreamSet", "cams")
HEAD = """\
apiVersion: rtvi.reconciler/v1
kind: Host
metadata: {name: local}
---
apiVersion: rtvi.reconciler/v1
kind: Deployment
metadata: {name: vlm}
spec:
  host: local
  profile: exploration
  image: emu:dev
  model: {use: vllm-compatible, path: "ngc:a/b/c:1"}
  port: {host: 18000}
---
apiVersion: rtvi.reconciler/v1
kind: StreamSet
metadata: {name: cams}
spec:
  deployment: vlm
  sources:
"""


def _desired(sources: str) -> StreamSetDesired:
    return _desired_from(HEAD + sources)


def _desired_from(text: str) -> StreamSetDesired:
    spec_set = parse_text(text, "s.yaml")
    ss = spec_set.streamsets[0]
    dep = spec_set.deployments[0]
    return StreamSetDesired(ss, dep, Key("StreamSet", "cams"), spec_hash(ss), "http://127.0.0.1:18000",
                            "local", None, desired_sources(ss, INSTANCE), "s.yaml")


def _converged(desired: StreamSetDesired) -> tuple[StreamSetObserved, ResourceStatus]:
    """What the world and the record look like after a successful apply of ``desired``."""
    record = ResourceStatus(resource=CAMS, kind="StreamSet", name="cams")
    streams, publishers = {}, {}
    for src in desired.sources.values():
        record.facts.setdefault("sources", {})[src.name] = {
            "hash": src.hash, "spec": src.spec.model_dump(mode="json", exclude_defaults=True)}
        record.upsert_inventory(InventoryItem(kind=KIND_STREAM, name=src.name, host="vlm",
                                              id=src.stream_id, state="created",
                                              created_at="t"))
        streams[src.stream_id] = StreamInfo(src.stream_id, "rtsp://x", "")
        if src.kind != "url":
            record.upsert_inventory(InventoryItem(kind=KIND_PUBLISHER, name=src.name,
                                                  host="local", id="c", created_at="t"))
            publishers[src.name] = _container(src.name, "running")
    return StreamSetObserved(streams, None, publishers), record


def _container(name: str, status: str) -> ContainerInfo:
    return ContainerInfo(id="c" * 64, name=f"pub-{name}", status=status, exit_code=137,
                         health=None, labels={}, image_id="sha256:x", started_at="")


def _actions(desired: StreamSetDesired, observed: StreamSetObserved,
             record: ResourceStatus | None) -> list[tuple[str, str]]:
    return [(a.verb, a.item) for a in plan_streamset(desired, observed, record).actions]


THREE = ("  - {name: red, synthetic: {colour: RED}}\n"
         "  - {name: green, synthetic: {colour: GREEN}}\n"
         "  - {name: cam, url: 'rtsp://127.0.0.1:8554/cam'}\n")


def test_new_set_publishes_and_registers_everything() -> None:
    desired = _desired(THREE)
    empty = StreamSetObserved({}, None, {})
    assert sorted(_actions(desired, empty, None)) == [
        ("publish", "green"), ("publish", "red"), ("register", "cam"), ("register", "green"),
        ("register", "red")]


def test_converged_set_has_no_actions_and_ids_are_deterministic() -> None:
    desired = _desired(THREE)
    observed, record = _converged(desired)
    assert _actions(desired, observed, record) == []
    again = _desired(THREE)
    assert {s.stream_id for s in again.sources.values()} == {
        stream_id(INSTANCE, CAMS, n) for n in ("red", "green", "cam")}
    assert stream_id("other", CAMS, "red") != stream_id(INSTANCE, CAMS,
                                                                      "red")


def test_only_the_changed_or_removed_source_is_touched() -> None:
    observed, record = _converged(_desired(THREE))
    changed = THREE.replace("colour: GREEN", "colour: GREEN, border: RED").replace(
        "  - {name: cam, url: 'rtsp://127.0.0.1:8554/cam'}\n", "")
    actions = _actions(_desired(changed), observed, record)
    assert sorted(actions) == [("remove", "cam"), ("replace", "green")]
    causes = [a.cause for a in plan_streamset(_desired(changed), observed, record).actions]
    assert any("synthetic" in c for c in causes), causes


def test_forgotten_streams_and_dead_publishers_are_repaired() -> None:
    desired = _desired(THREE)
    observed, record = _converged(desired)
    observed.streams.clear()  # the service restarted
    observed.publishers["red"] = _container("red", "exited")
    actions = plan_streamset(desired, observed, record).actions
    found: dict[tuple[str, str], Any] = {(a.verb, a.item): a.cause for a in actions}
    assert "no longer registered with RTVI" in found[("register", "cam")]
    assert "exited" in found[("publish", "red")]
    assert ("publish", "green") not in found


def test_caption_prompt_change_touches_no_registration() -> None:
    desired = _desired(THREE)
    observed, record = _converged(desired)
    with_captions = HEAD + THREE + "  captions: {prompt: 'What colour'}\n"
    captioned = _desired_from(with_captions)
    assert {s.hash for s in captioned.sources.values()} == {
        s.hash for s in desired.sources.values()}
    assert _actions(captioned, observed, record) == []
