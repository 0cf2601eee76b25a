"""What a steady-state StreamSet pass may trust, and what the frame watch may write (real Store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controllers.clients.http_api import ClientPool
from controllers.errors import ControllerError
from controllers.kinds.streamset.captions import CaptionHub
from controllers.kinds.streamset.controller import StreamSetController
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from controllers.kinds.streamset.framewatch import FrameWatch
from controllers.kinds.streamset.health import SourceReport, StreamSetResult
from controllers.kinds.streamset.plan import (
    StreamPlan,
    StreamSetDesired,
    desired_sources,
    source_action,
)
from specs.models import Deployment, StreamSet
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store
from tests.e2e.stream_helpers import colours, streamset
from tests.specs_factory import deployment

RESOURCE = Key("StreamSet", "cams")


def _stamp(seconds_ago: float) -> str:
    then = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return then.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state")


def _desired() -> StreamSetDesired:
    ss = StreamSet.model_validate(streamset(colours(["RED", "BLUE", "GREEN", "CYAN"])))
    dep = Deployment.model_validate(deployment("vlm", "rtvi@sha256:" + "ab" * 32, 18000))
    return StreamSetDesired(streamset=ss, deployment=dep, resource=RESOURCE, spec_hash="h",
                            rtvi_url="http://127.0.0.1:1", publisher_host="local", vst_url=None,
                            sources=desired_sources(ss, "inst"), source_file="specs/x.yaml")


def _record(store: Store, sources: dict[str, SourceFacts]) -> None:
    def mutate(st: ResourceStatus) -> None:
        known = StreamSetStatusFacts.of(st)
        known.max_frame_age_seconds = 15
        known.sources = sources
        known.put(st)
    store.update(RESOURCE, mutate)


def test_only_recent_proofs_at_this_spec_are_trusted(store: Store) -> None:
    desired = _desired()
    src = desired.sources
    _record(store, {
        "red": SourceFacts(registered=True, frames_fresh=True, hash=src["red"].hash,
                           last_frame_at=_stamp(5), rtvi_url="rtsp://a/red"),
        "blue": SourceFacts(registered=True, frames_fresh=True, hash=src["blue"].hash,
                            last_frame_at=_stamp(3 * 3600), rtvi_url="rtsp://a/blue"),  # old
        "green": SourceFacts(registered=True, frames_fresh=False, hash=src["green"].hash,
                             last_frame_at=_stamp(5)),  # the watch saw it stop
        "cyan": SourceFacts(registered=True, frames_fresh=True, hash="another spec",
                            last_frame_at=_stamp(5)),
    })
    ctl = StreamSetController(store, "inst", lambda _h: None, CaptionHub(),  # type: ignore
                              lambda *_: None, ClientPool(), frames_watched=True)
    result = StreamSetResult({n: SourceReport(n) for n in src})
    record = store.load(RESOURCE)
    assert record is not None
    ctl._trust_recorded_frames(desired, result, record)
    assert {n for n, r in result.sources.items() if r.trusted and r.fresh} == {"red"}


def test_the_watch_never_writes_onto_a_re_registered_source_or_a_pruned_record(
        store: Store) -> None:
    woken: list[str] = []
    watch = FrameWatch(store, woken.append)
    _record(store, {"red": SourceFacts(registered=True, frames_fresh=True,
                                       rtvi_url="rtsp://new/red", last_frame_at=_stamp(60))})
    stopped = SourceFacts(frames_fresh=False, error="no frame")
    assert watch._record(RESOURCE, {("red", "rtsp://old/red"): stopped}) is False
    record = store.load(RESOURCE)
    assert StreamSetStatusFacts.of(record).sources["red"].frames_fresh is True
    assert watch._record(RESOURCE, {("red", "rtsp://new/red"): stopped}) is True
    assert StreamSetStatusFacts.of(store.load(RESOURCE)).sources["red"].frames_fresh is False

    store.delete(RESOURCE)
    watch._record(RESOURCE, {("red", "rtsp://new/red"): stopped})
    assert store.load(RESOURCE) is None  # a background writer never brings a record back


def test_a_pass_that_changes_sources_says_so_while_it_registers_and_proves_them(
        store: Store) -> None:
    """Registering and proving ~50 sources takes minutes; `status` must say what is going on,
    not the verdict of the pass before (say, waiting for the Deployment)."""
    desired = _desired()
    store.update(RESOURCE, lambda st: st.set_condition(
        "Ready", "Unknown", "WaitingForDeployment", "waiting for Deployment/vlm"))
    ctl = StreamSetController(store, "inst", lambda _h: None, CaptionHub(),  # type: ignore
                              lambda *_: None, ClientPool())
    plan = StreamPlan(RESOURCE, [source_action("register", n, "new source")
                                 for n in ("red", "blue")]
                      + [source_action("remove", "old", "no longer desired")])
    ctl._record_desired(desired, plan)
    record = store.load(RESOURCE)
    assert record is not None
    progressing = record.condition("Progressing")
    assert progressing is not None
    assert progressing.status == "True"
    assert progressing.message == "applying 3 change(s): register 2, remove 1"
    # Frames are then proved; nothing answers on port 1, so the pass ends degraded, but while
    # it waited the record said how far it had got.
    urls = {n: f"rtsp://127.0.0.1:1/{n}" for n in desired.sources}
    with pytest.raises(ControllerError):
        ctl._verify(desired, urls, deadline=0.0, waiting=True)
    record = store.load(RESOURCE)
    assert record is not None
    progressing = record.condition("Progressing")
    assert progressing is not None
    assert progressing.reason == "ProvingFrames"
    # ... and on what it waited: the first sources with their error, and how many more.
    assert progressing.message.startswith(
        "proving frames: 0 of 4 source(s) fresh so far; waiting on "), progressing.message
    assert progressing.message.endswith(" and 2 more"), progressing.message
    assert progressing.message.count("(no frame from rtsp://127.0.0.1:1/") == 2
    known = StreamSetStatusFacts.of(record)
    assert all(s.frames_fresh is False and s.error and "no frame" in s.error
               for s in known.sources.values()), known.sources


def test_a_pass_with_nothing_to_change_writes_no_progress(store: Store) -> None:
    desired = _desired()
    ctl = StreamSetController(store, "inst", lambda _h: None, CaptionHub(),  # type: ignore
                              lambda *_: None, ClientPool())
    ctl._record_desired(desired, StreamPlan(RESOURCE))
    record = store.load(RESOURCE)
    assert record is not None
    assert record.condition("Progressing") is None
