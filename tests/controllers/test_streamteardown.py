"""Stream teardown's rules against the RTVI emulator served in-process (no decoding, no child
process: the fast layer). The end-to-end teardown, with publishers, VST and real frames, is
in ``tests/e2e/test_streamset_e2e.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controllers.clients.docker_client import DockerEngine
from controllers.clients.rtvi_client import MAX_BATCH, RtviClient
from controllers.clients.vst_client import VstClient
from controllers.errors import HostUnreachable
from controllers.kinds.streamset.captions import CaptionHub
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from controllers.kinds.streamset.plan import KIND_PUBLISHER, KIND_SENSOR, KIND_STREAM, sensor_name
from controllers.kinds.streamset.teardown import Teardown, delete_streams
from controllers.waiting import Stopped, until
from state.keys import Key
from state.models import InventoryItem, Owner, ResourceStatus
from state.store import Store
from tests.inproc_rtvi import InprocRtvi, inproc_rtvi
from tests.inproc_vst import inproc_vst
from tests.ports import free_port

RESOURCE = Key("StreamSet", "cams")
DELETE_ROUTE = "DELETE /v1/streams/delete-batch"


@pytest.fixture
def rtvi(tmp_path: Path) -> Iterator[InprocRtvi]:
    with inproc_rtvi(RTVI_EMU_DRAIN_S="0.2", RTVI_EMU_RECORD=str(tmp_path / "x.jsonl")) as emu:
        yield emu


def _add(rtvi: InprocRtvi, n: int) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(n)]
    client = RtviClient(rtvi.url)
    try:
        for i in range(0, n, MAX_BATCH):
            batch = ids[i:i + MAX_BATCH]
            result = client.add_streams([{"id": sid, "liveStreamUrl": f"rtsp://127.0.0.1:1/{sid}",
                                          "description": "cam"} for sid in batch])
            assert sorted(result.done) == sorted(batch)
    finally:
        client.close()
    return ids


def _deletes(rtvi: InprocRtvi) -> list[dict[str, object]]:
    return [e["request_body"] for e in rtvi.app.recorder.exchanges()  # type: ignore[misc]
            if e["path"] == "/v1/streams/delete-batch"]


def _lists(rtvi: InprocRtvi) -> int:
    return sum(1 for e in rtvi.app.recorder.exchanges()
               if e["path"] == "/v1/streams/get-stream-info")


def _legacy(rtvi: InprocRtvi, drain_s: float) -> None:
    """A release before blocking deletes: a delete answers at once, and its streams stay
    listed (draining) for ``drain_s``."""
    rtvi.app.knobs.update(legacy_delete=True, drain_s=drain_s)


def _delete(rtvi: InprocRtvi, ids: list[str], within_s: float = 10.0, drain: int = 5,
            stop: threading.Event | None = None) -> list[str]:
    client = RtviClient(rtvi.url)
    try:
        return delete_streams(client, ids, drain, stop, time.monotonic() + within_s)
    finally:
        client.close()


# --- delete_streams -----------------------------------------------------------------------------

def test_streams_are_deleted_in_one_blocking_batch_and_confirmed_gone(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 3)
    assert _delete(rtvi, ids + ids[:1]) == []  # a repeated ID is asked for once
    assert rtvi.stream_ids() == set()
    sent = _deletes(rtvi)
    assert len(sent) == 1
    assert sent[0] == {"stream_ids": ids, "blocking": True, "drain_timeout_seconds": 5}
    assert _lists(rtvi) == 1  # one listing confirms it: the blocking call waited for the drain


def test_more_than_a_batch_is_split_at_the_batch_limit(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, MAX_BATCH + 3)
    assert _delete(rtvi, ids) == []
    assert rtvi.stream_ids() == set()
    assert sorted(len(body["stream_ids"]) for body in _deletes(rtvi)) == [3, MAX_BATCH]  # type: ignore[arg-type]


def test_an_unknown_id_counts_as_gone(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 1)
    assert _delete(rtvi, [*ids, str(uuid.uuid4())]) == []
    assert rtvi.stream_ids() == set()


def test_the_drain_timeout_sent_is_cut_to_the_time_left(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 2)
    assert _delete(rtvi, ids[:1], within_s=3.0, drain=600) == []
    drain = _deletes(rtvi)[0]["drain_timeout_seconds"]
    assert isinstance(drain, int)
    assert 1 <= drain <= 3
    assert _delete(rtvi, ids[1:], within_s=0.5, drain=600) == []
    assert _deletes(rtvi)[1]["drain_timeout_seconds"] == 0  # under a second left: none


def test_streams_still_draining_after_the_call_are_awaited_by_listing_not_asked_again(
        rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 2)
    _legacy(rtvi, 1.5)
    assert _delete(rtvi, ids, within_s=20.0) == []
    assert rtvi.stream_ids() == set()
    statuses = [e["status"] for e in rtvi.app.recorder.exchanges()
                if e["path"] == "/v1/streams/delete-batch"]
    assert statuses == [422, 200]  # refused the blocking fields, then asked once without them
    assert _deletes(rtvi)[1] == {"stream_ids": ids}
    assert _lists(rtvi) >= 2  # then listed until they went


def test_streams_draining_past_the_deadline_are_reported_still_listed(
        rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 1)
    _legacy(rtvi, 30.0)
    assert _delete(rtvi, ids, within_s=1.0) == ids
    assert rtvi.stream_ids() == set(ids)


def test_past_the_deadline_one_ask_and_one_look_decide(rtvi: InprocRtvi) -> None:
    busy, draining = _add(rtvi, 2)
    rtvi.stuck(busy)
    assert _delete(rtvi, [busy], within_s=0.0) == [busy]
    assert len(_deletes(rtvi)) == 1  # no time left: not asked again
    rtvi.unstuck()
    _legacy(rtvi, 0.6)
    assert _delete(rtvi, [draining], within_s=0.0) == [draining]  # not waited for
    assert rtvi.stream_ids() == {busy, draining}


def test_a_stop_ends_the_wait_for_a_drain_at_once(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 1)
    _legacy(rtvi, 30.0)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(Stopped):
        _delete(rtvi, ids, within_s=60.0, stop=stop)


def test_a_stream_in_use_is_asked_again_with_growing_pauses_then_reported(
        rtvi: InprocRtvi) -> None:
    free, busy = _add(rtvi, 2)
    rtvi.stuck(busy)
    assert _delete(rtvi, [free, busy], within_s=2.0) == [busy]
    assert rtvi.stream_ids() == {busy}
    sent = _deletes(rtvi)
    assert sent[0]["stream_ids"] == [free, busy]
    assert all(body["stream_ids"] == [busy] for body in sent[1:])  # only what is left
    # Asked again (not given up after one refusal), but never in a tight loop: the first
    # pause is half a second, the next one longer.
    assert 2 <= len(sent) <= 4
    times = [float(e["time"]) for e in rtvi.app.recorder.exchanges()  # type: ignore[arg-type]
             if e["path"] == "/v1/streams/delete-batch"]
    assert 0.5 <= times[1] - times[0] < 0.95
    assert len(times) < 3 or times[2] - times[1] >= 0.95


def test_a_stream_freed_while_retrying_is_deleted(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 2)
    rtvi.stuck(ids[1])
    def unstick_after_the_first_delete() -> None:
        if until(lambda: True if len(_deletes(rtvi)) >= 1 else None, timeout_s=10, pace=0.02):
            rtvi.unstuck()
    threading.Thread(target=unstick_after_the_first_delete, daemon=True).start()
    assert _delete(rtvi, ids) == []
    assert rtvi.stream_ids() == set()


def test_a_stop_ends_the_retries_at_once(rtvi: InprocRtvi) -> None:
    ids = _add(rtvi, 1)
    rtvi.stuck(ids[0])
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        _delete(rtvi, ids, within_s=60.0, stop=stop)
    assert time.monotonic() - started < 30.0  # not the 60 s deadline
    assert rtvi.stream_ids() == set(ids)


# --- Teardown: what is forgotten and what is kept -----------------------------------------------

def _no_engine(host: str) -> DockerEngine:
    raise AssertionError(f"no publisher may be touched here (asked for Host {host})")


def _no_vst(url: str) -> VstClient:
    raise AssertionError(f"no VST may be touched here (asked for {url})")


def _teardown(store: Store, vst: Callable[[str], VstClient] = _no_vst,
              engine_for: Callable[[str], DockerEngine] = _no_engine,
              stop: threading.Event | None = None,
              hub: CaptionHub | None = None) -> tuple[Teardown, list[str]]:
    said: list[str] = []
    return Teardown(store, Owner("default", "0" * 32), hub or CaptionHub(), engine_for,
                    lambda resource, message: said.append(f"{resource}: {message}"),
                    RtviClient, vst, stop), said


def _record(store: Store, streams: dict[str, str], downstream: tuple[str, ...] = (),
            where: dict[str, str] | None = None, ids: dict[str, str | None] | None = None
            ) -> None:
    """A StreamSet record; ``downstream`` kinds get an item per source, on the Host or VST
    ``where[kind]`` (default "local"), with ID ``ids[kind]`` (default "<kind>-<name>")."""
    record = ResourceStatus(resource=RESOURCE, kind="StreamSet", name="cams")
    known = StreamSetStatusFacts.of(record)
    for name, sid in streams.items():
        record.upsert_inventory(InventoryItem(kind=KIND_STREAM, name=name, host="vlm", id=sid,
                                              state="created", created_at="t"))
        for kind in downstream:
            id_ = (ids or {}).get(kind, f"{kind}-{name}")
            record.upsert_inventory(InventoryItem(kind=kind, name=name,
                                                  host=(where or {}).get(kind, "local"), id=id_,
                                                  state="created" if id_ else "pending",
                                                  created_at="t"))
        known.sources[name] = SourceFacts(stream_id=sid, registered=True)
    known.put(record)
    store.save(record)


def _inventory(store: Store) -> list[tuple[str, str]]:
    record = store.load(RESOURCE)
    assert record is not None
    return sorted((i.kind, i.name) for i in record.inventory)


def _facts(store: Store) -> list[str]:
    record = store.load(RESOURCE)
    assert record is not None
    return sorted(StreamSetStatusFacts.of(record).sources)


def test_removed_streams_are_forgotten_with_their_facts(rtvi: InprocRtvi,
                                                        tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    a, b, c = _add(rtvi, 3)
    _record(store, {"a": a, "b": b, "c": c})
    teardown, said = _teardown(store)
    assert teardown.sources(RESOURCE, ["a", "b"], rtvi.url, 5, 30) == []
    assert rtvi.stream_ids() == {c}
    assert _inventory(store) == [(KIND_STREAM, "c")]
    assert _facts(store) == ["c"]
    assert said == [f"{RESOURCE}: deleting 2 RTVI stream(s) (drain timeout 5s)"]
    assert _deletes(rtvi)[0]["drain_timeout_seconds"] == 5  # the teardown's deadline is ahead


def test_a_stream_still_listed_keeps_its_sensor_publisher_and_facts(rtvi: InprocRtvi,
                                                                    tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    a, b = _add(rtvi, 2)
    _record(store, {"a": a, "b": b}, downstream=(KIND_SENSOR, KIND_PUBLISHER))
    rtvi.stuck(b)
    teardown, _ = _teardown(store)
    left = teardown.sources(RESOURCE, ["b"], rtvi.url, 5, 1)
    assert left == [f"b: RTVI stream {b} still listed after the deadline",
                    "b: sensor kept: its RTVI stream is still registered",
                    "b: publisher kept: its RTVI stream is still registered"]
    assert rtvi.stream_ids() == {a, b}
    assert _inventory(store) == [(KIND_PUBLISHER, "a"), (KIND_PUBLISHER, "b"), (KIND_SENSOR, "a"),
                                 (KIND_SENSOR, "b"), (KIND_STREAM, "a"), (KIND_STREAM, "b")]
    assert _facts(store) == ["a", "b"]


def test_an_unreachable_service_keeps_everything_and_names_each_stream(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    a = str(uuid.uuid4())
    _record(store, {"a": a}, downstream=(KIND_SENSOR,))
    teardown, _ = _teardown(store)
    left = teardown.sources(RESOURCE, ["a"], f"http://127.0.0.1:{free_port()}", 5, 2)
    assert len(left) == 2
    assert left[0].startswith(f"a: RTVI stream {a} not deleted (")
    assert "127.0.0.1" in left[0]
    assert left[1] == "a: sensor kept: its RTVI stream is still registered"
    assert _inventory(store) == [(KIND_SENSOR, "a"), (KIND_STREAM, "a")]
    assert _facts(store) == ["a"]


def test_a_gone_service_forgets_its_streams_without_a_call(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    _record(store, {"a": str(uuid.uuid4()), "b": str(uuid.uuid4())})
    teardown, said = _teardown(store)
    assert teardown.sources(RESOURCE, ["a"], None, 5, 30) == []
    assert _inventory(store) == [(KIND_STREAM, "b")]
    assert _facts(store) == ["b"]
    assert said == []


def test_a_resource_without_a_record_has_nothing_to_tear_down(tmp_path: Path) -> None:
    teardown, said = _teardown(Store(tmp_path / "state"))
    assert teardown.sources(RESOURCE, ["a"], "http://127.0.0.1:1", 5, 30) == []
    assert said == []


def test_sensors_go_once_their_streams_are_gone_by_id_or_by_adopted_name(
        rtvi: InprocRtvi, tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    a, b = _add(rtvi, 2)
    with inproc_vst() as vst:
        client = VstClient(vst.url)
        try:
            known = client.add_sensor("rtsp://127.0.0.1:1/a", sensor_name("default", "cams", "a"))
            # A crash between "VST created it" and "we recorded its ID": adopted by name.
            client.add_sensor("rtsp://127.0.0.1:1/b", sensor_name("default", "cams", "b"))
            other = client.add_sensor("rtsp://127.0.0.1:1/x", "someone-elses")
        finally:
            client.close()
        _record(store, {"a": a}, downstream=(KIND_SENSOR,), where={KIND_SENSOR: vst.url},
                ids={KIND_SENSOR: known})
        record = store.load(RESOURCE)
        assert record is not None
        record.upsert_inventory(InventoryItem(kind=KIND_STREAM, name="b", host="vlm", id=b,
                                              state="created", created_at="t"))
        record.upsert_inventory(InventoryItem(kind=KIND_SENSOR, name="b", host=vst.url,
                                              state="pending", created_at="t"))
        store.save(record)
        teardown, _ = _teardown(store, vst=VstClient)
        assert teardown.sources(RESOURCE, ["a", "b"], rtvi.url, 5, 30) == []
        assert vst.sensor_ids() == {other}  # theirs stays
        assert _inventory(store) == []


def test_a_recorded_sensor_id_is_deleted_not_every_sensor_of_its_name(
        rtvi: InprocRtvi, tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    (a,) = _add(rtvi, 1)
    with inproc_vst() as vst:
        client = VstClient(vst.url)
        try:
            name = sensor_name("default", "cams", "a")
            ours = client.add_sensor("rtsp://127.0.0.1:1/a", name)
            twin = client.add_sensor("rtsp://127.0.0.1:1/a2", name)  # not on our record
        finally:
            client.close()
        _record(store, {"a": a}, downstream=(KIND_SENSOR,), where={KIND_SENSOR: vst.url},
                ids={KIND_SENSOR: ours})
        teardown, _ = _teardown(store, vst=VstClient)
        assert teardown.sources(RESOURCE, ["a"], rtvi.url, 5, 30) == []
        assert vst.sensor_ids() == {twin}


def test_a_sensor_whose_vst_cannot_be_reached_stays_on_record(rtvi: InprocRtvi,
                                                              tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    (a,) = _add(rtvi, 1)
    gone = f"http://127.0.0.1:{free_port()}"
    _record(store, {"a": a}, downstream=(KIND_SENSOR,), where={KIND_SENSOR: gone},
            ids={KIND_SENSOR: None})
    teardown, _ = _teardown(store, vst=VstClient)
    left = teardown.sources(RESOURCE, ["a"], rtvi.url, 5, 30)
    assert len(left) == 1
    assert left[0].startswith(f"a: VST sensor (pending) not deleted (VST at "
                                                 f"{gone}")
    assert _inventory(store) == [(KIND_SENSOR, "a")]
    assert _facts(store) == ["a"]


def test_a_publisher_whose_host_cannot_be_reached_stays_on_record(rtvi: InprocRtvi,
                                                                  tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    (a,) = _add(rtvi, 1)
    _record(store, {"a": a}, downstream=(KIND_PUBLISHER,), where={KIND_PUBLISHER: "edge-1"})
    asked: list[str] = []

    def engine_for(host: str) -> DockerEngine:
        asked.append(host)
        raise HostUnreachable(f"Host {host}: its Docker engine does not answer")
    teardown, _ = _teardown(store, engine_for=engine_for)
    assert teardown.sources(RESOURCE, ["a"], rtvi.url, 5, 30) == [
        "a: publisher not removed (Host edge-1: its Docker engine does not answer)"]
    assert asked == ["edge-1"]  # where it was created, not where the spec points now
    assert _inventory(store) == [(KIND_PUBLISHER, "a")]


def test_a_stopping_reconciler_ends_a_teardown_at_once(rtvi: InprocRtvi, tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    (a,) = _add(rtvi, 1)
    _record(store, {"a": a})
    rtvi.stuck(a)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    teardown, _ = _teardown(store, stop=stop)
    with pytest.raises(Stopped):
        teardown.sources(RESOURCE, ["a"], rtvi.url, 5, 60)
    assert _inventory(store) == [(KIND_STREAM, "a")]


def test_captions_are_stopped_before_the_delete(rtvi: InprocRtvi, tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    a, b = _add(rtvi, 2)
    _record(store, {"a": a, "b": b})
    hub = CaptionHub()
    try:
        for sid in (a, b):
            hub.ensure(rtvi.url, sid, {"id": sid, "model": "m", "prompt": "what is this?"})
        teardown, _ = _teardown(store, hub=hub)
        assert teardown.sources(RESOURCE, ["a"], rtvi.url, 5, 30) == []
        assert set(hub._sessions) == {b}  # a's session ended with its stream; b's goes on
    finally:
        hub.close()
    paths = [(e["method"], e["path"]) for e in rtvi.app.recorder.exchanges()]
    assert ("DELETE", f"/v1/generate_captions/{a}") in paths


def test_caption_requests_are_stopped_before_the_delete(rtvi: InprocRtvi,
                                                        tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    (a,) = _add(rtvi, 1)
    _record(store, {"a": a})
    teardown, _ = _teardown(store)
    assert teardown.sources(RESOURCE, ["a"], rtvi.url, 5, 30) == []
    paths = [(e["method"], e["path"]) for e in rtvi.app.recorder.exchanges()]
    stop_at = paths.index(("DELETE", f"/v1/generate_captions/{a}"))
    assert stop_at < paths.index(("DELETE", "/v1/streams/delete-batch"))
