"""The StreamSet controller: publish sources, register them with VST and RTVI, prove frames flow.

Order matters both ways (contracts/rtvi-api.md, vst-api.md). Up: publishers → VST sensors (wait
for the ``/live/`` URL, never fall back to the camera URL) → RTVI streams (deterministic IDs,
write-ahead inventory, partial success handled) → caption sessions → frames and captions checked.
Down (``teardown``): stop captions → one blocking batch delete per ≤256 IDs under one shared
deadline, ResourceInUse retried → absence verified by listing → VST sensors → publishers, and
anything left is reported, never silently dropped from the inventory.

Only sources whose plan has an action are touched; the rest are verified (frames, captions) and
left registered.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from textwrap import shorten
from typing import Any
from urllib.parse import urlsplit

import tenacity

from controllers.clients.docker_client import DockerEngine
from controllers.clients.http_api import ClientPool
from controllers.clients.rtvi_client import MAX_BATCH, RtviBusy, RtviClient, StreamInfo
from controllers.clients.vst_client import VstClient
from controllers.errors import ControllerError, PermanentError, TemporaryError
from controllers.kinds.host.session import HostSession
from controllers.kinds.streamset import publishing
from controllers.kinds.streamset.captions import CaptionHub
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from controllers.kinds.streamset.frames import MAX_PARALLEL, probe_many
from controllers.kinds.streamset.framewatch import TRUST_PROOF_S, age_s
from controllers.kinds.streamset.health import (
    SourceReport,
    SourcesDegraded,
    StreamSetResult,
    caption_facts,
    degraded_message,
    unhealthy,
)
from controllers.kinds.streamset.plan import (
    KIND_PUBLISHER,
    KIND_SENSOR,
    KIND_STREAM,
    DesiredSource,
    StreamPlan,
    StreamSetDesired,
    StreamSetObserved,
    plan_streamset,
    recorded_sources,
)
from controllers.kinds.streamset.teardown import Teardown, adoptable
from controllers.waiting import until
from state.keys import Key
from state.models import HistoryEntry, InventoryItem, Owner, ResourceStatus, utc_now
from state.redaction import redact_urls
from state.store import Store

STEADY_PROBE_TIMEOUT_S = 8.0
PARALLEL_PUBLISHER_STARTS = 8  # each start waits on the engine
VERIFY_POLL_S = 1.0
NAMED_WAITING = 2  # sources the proving message names, with their error
WHY_CHARS = 160
VST_POLL_FIRST_S = 0.25
VST_POLL_MAX_S = 4.0
APPLYING = "Applying"
VERIFYING = "ProvingFrames"
Progress = Callable[[str, str], None]


class AtCapacity(TemporaryError):
    """RTVI answered 503 ServerBusy for some sources: wait (with backoff) for capacity."""


class TeardownIncomplete(TemporaryError):
    """Something we own could not be removed before the deadline; the message lists it."""


class StreamSetController:
    """Acts for one StreamSet; ``session_for`` gives the session of a Host by name (its
    engine, and the view of it that every resource on the Host shares), ``clients`` the
    pass's HTTP clients."""

    def __init__(self, store: Store, instance: Owner, session_for: Callable[[str], HostSession],
                 hub: CaptionHub, progress: Progress, clients: ClientPool,
                 count: Callable[[str], None] | None = None,
                 stop: threading.Event | None = None, frames_watched: bool = False) -> None:
        self.store, self.instance, self.hub = store, instance, hub
        # A FrameWatch re-proves frames in the background (the daemon): a pass that changed
        # nothing trusts the recorded proof instead of decoding every source again.
        self.frames_watched = frames_watched
        self.stop = stop  # set: every wait ends at once (Stopped)
        self._session_for = session_for
        self._progress = progress
        self._clients = clients
        self._count = count
        self._teardown = Teardown(store, instance, hub, self._engine_for, progress, self._rtvi,
                                  self._vst, stop)

    # --- observe and plan ----------------------------------------------------------------------

    def observe(self, desired: StreamSetDesired) -> StreamSetObserved:
        """Fresh state of RTVI, VST and the publishers; any failed list raises (never "none")."""
        rtvi = self._rtvi(desired.rtvi_url)
        try:
            streams = {s.id: s for s in rtvi.list_streams()}
        finally:
            rtvi.close()
        sensors = None
        if desired.vst_url is not None:
            vst = self._vst(desired.vst_url)
            try:
                sensors = {s.id: s for s in vst.list_sensors() if s.state != "removed"}
            finally:
                vst.close()
        owned = publishing.publishers_in(self._session_for(desired.publisher_host).view(),
                                         self.instance, desired.resource)
        return StreamSetObserved(streams, sensors, owned)

    def plan(self, desired: StreamSetDesired) -> StreamPlan:
        """Pinned media is checked first: a mismatch refuses the plan before anything acts."""
        publishing.check_files(list(desired.sources.values()), desired.streamset.spec.publisher)
        return plan_streamset(desired, self.observe(desired), self.store.load(desired.resource))

    # --- apply ---------------------------------------------------------------------------------

    def apply(self, desired: StreamSetDesired, the_plan: StreamPlan, timeout_s: float | None,
              revision: str | None) -> StreamSetResult:
        started = time.monotonic()
        budget = float(desired.streamset.spec.readiness.timeoutSeconds)
        if timeout_s is not None:
            budget = min(budget, timeout_s)
        deadline = started + budget
        self._record_desired(desired, the_plan)
        for action in the_plan.actions:
            self._progress(desired.resource, str(action))
        removed = [a.item for a in the_plan.actions if a.verb in ("remove", "replace")]
        if removed:
            left = self.teardown(desired.resource, removed, desired.rtvi_url,
                                 desired.streamset.spec.teardown.drainTimeoutSeconds,
                                 desired.streamset.spec.teardown.deadlineSeconds)
            if left:
                raise TeardownIncomplete("could not remove: " + "; ".join(left))
        touched = {a.item for a in the_plan.actions if a.verb != "remove"}
        origins = self._publish(desired, the_plan)
        rtvi_urls, retired = self._sensors(desired, the_plan, origins)
        removes = any(a.verb in ("remove", "replace") for a in the_plan.actions)
        touched |= self._register(desired, rtvi_urls, None if removes else the_plan.listed)
        self._retire_sensors(desired, retired)
        self._history(desired, the_plan, revision)
        # Nothing (re-)registered: the frame watch's recent proofs may stand (read after the
        # steps above, so what the watch found meanwhile counts).
        known = self.store.load(desired.resource) if self.frames_watched and not touched else None
        result = self._verify(desired, rtvi_urls, deadline, waiting=bool(touched), known=known)
        result.waited_s = time.monotonic() - started
        # Every source trusted: the verdict is all this pass would write, and only this pass
        # writes it, so the record just read can say whether it is already written.
        trusted = all(r.trusted for r in result.sources.values())
        result.facts = self._ready_facts(desired, result, revision)
        result.known = known if trusted else None
        return result

    def _publish(self, desired: StreamSetDesired, the_plan: StreamPlan) -> dict[str, str]:
        """Ensure a running publisher per published source (started in parallel: each start
        waits on the engine); the origin URL of every source."""
        published = any(src.kind != "url" for src in desired.sources.values())
        recorded = recorded_sources(self.store.load(desired.resource)) if published else {}
        origins: dict[str, str] = {}
        starts: dict[str, int | None] = {}
        for src in desired.sources.values():
            if src.kind == "url":
                assert src.spec.url is not None
                origins[src.name] = src.spec.url
                continue
            verbs = the_plan.verbs(src.name)
            origin = rec.origin if (rec := recorded.get(src.name)) else None
            if not origin and not {"publish", "replace"} & set(verbs):
                origin = self._adopt_publisher(desired, src)
            if "publish" in verbs or "replace" in verbs or not origin:
                # Same port as before, so the URL VST and RTVI hold stays valid.
                keep = origin is not None and "replace" not in verbs
                starts[src.name] = urlsplit(origin).port if origin and keep else None
            else:
                origins[src.name] = origin
        if starts:
            with ThreadPoolExecutor(max_workers=PARALLEL_PUBLISHER_STARTS) as pool:
                urls = pool.map(lambda item: self._start_publisher(
                    desired, desired.sources[item[0]], item[1]), starts.items())
                origins.update(zip(starts, urls, strict=True))
        return origins

    def _adopt_publisher(self, desired: StreamSetDesired, src: DesiredSource) -> str | None:
        """The URL of the running publisher of ``src`` that this very spec started, recorded
        again, when the record that knew it is lost (a deleted or unreadable status file):
        what runs is adopted, never replaced on a new port. None when there is none."""
        found = publishing.running_url(
            self._engine_for(desired.publisher_host),
            self._session_for(desired.publisher_host).view(), self.instance, desired.resource,
            desired.spec_hash, src, desired.streamset.spec.publisher, stop=self.stop)
        if found is None:
            return None
        running, url = found
        self._write(desired, [InventoryItem(kind=KIND_PUBLISHER, name=src.name,
                                            host=desired.publisher_host, id=running.id,
                                            state="created", created_at=utc_now())],
                    {src.name: SourceFacts(origin=url)})
        self._progress(desired.resource, f"source {src.name}: adopted its running publisher "
                                         f"{running.name} ({url})")
        return url

    def _start_publisher(self, desired: StreamSetDesired, src: DesiredSource,
                         port: int | None) -> str:
        self._inventory(desired, InventoryItem(kind=KIND_PUBLISHER, name=src.name,
                                               host=desired.publisher_host, created_at=utc_now()))
        engine = self._engine_for(desired.publisher_host)
        args = (engine, self.instance, desired.resource, desired.spec_hash, src,
                desired.streamset.spec.publisher)
        try:
            container_id, url = publishing.start(*args, port, stop=self.stop)
        except TemporaryError:
            if port is None:
                raise
            # Its old port is taken now: take any (the new URL re-registers downstream).
            container_id, url = publishing.start(*args, None, stop=self.stop)
        self._write(desired, [InventoryItem(kind=KIND_PUBLISHER, name=src.name,
                                            host=desired.publisher_host, id=container_id,
                                            state="created", created_at=utc_now())],
                    {src.name: SourceFacts(origin=url)})
        return url

    def _sensors(self, desired: StreamSetDesired, the_plan: StreamPlan,
                 origins: dict[str, str]) -> tuple[dict[str, str], list[str]]:
        """Register with VST where needed. Returns the URL RTVI should receive for every
        source, and the sensors replaced (deleted only after RTVI lets go of their URLs)."""
        if desired.vst_url is None:
            return dict(origins), []
        vst = self._vst(desired.vst_url)
        record = self.store.load(desired.resource)
        camera = {name: fact.camera for name, fact in recorded_sources(record).items()}
        retired: list[str] = []
        try:
            ids: dict[str, str] = {}
            for src in desired.sources.values():
                item = record.inventory_item(KIND_SENSOR, src.name) if record else None
                verbs = the_plan.verbs(src.name)
                if item is not None and item.id is None:  # a crash after add, before record
                    found = adoptable(vst, src.sensor_name)
                    if found:
                        item = self._mark_sensor(desired, src.name, found[0], None)
                        retired += found[1:]
                        verbs = verbs - {"register-sensor"}
                # A publisher restarted on its old port keeps its URL: the sensor stays.
                if item is not None and item.id and not verbs & {"register-sensor", "replace"} \
                        and camera.get(src.name) in (origins[src.name], None):
                    ids[src.name] = item.id
                    continue
                if item is not None and item.id:
                    retired.append(item.id)  # its camera URL changed, or VST lost it
                self._inventory(desired, InventoryItem(kind=KIND_SENSOR, name=src.name,
                                                       host=desired.vst_url, created_at=utc_now()))
                sensor = vst.add_sensor(origins[src.name], src.sensor_name)
                ids[src.name] = self._mark_sensor(desired, src.name, sensor,
                                                  origins[src.name]).id or sensor
            return self._live_urls(desired, vst, ids), retired
        finally:
            vst.close()

    def _mark_sensor(self, desired: StreamSetDesired, name: str, sensor: str,
                     camera: str | None) -> InventoryItem:
        assert desired.vst_url is not None
        item = InventoryItem(kind=KIND_SENSOR, name=name, host=desired.vst_url, id=sensor,
                             state="created", created_at=utc_now())
        self._write(desired, [item], {name: SourceFacts(camera=camera)} if camera else None)
        return item

    def _retire_sensors(self, desired: StreamSetDesired, sensors: list[str]) -> None:
        """Delete replaced sensors, now that no RTVI stream uses their URLs."""
        if not sensors or desired.vst_url is None:
            return
        vst = self._vst(desired.vst_url)
        try:
            for sensor in sensors:
                try:
                    vst.delete_sensor(sensor)
                except ControllerError as exc:
                    self.store.events.append(desired.resource, "Warning", "LeftBehind",
                                             f"replaced VST sensor {sensor} not deleted: {exc}")
        finally:
            vst.close()

    def _live_urls(self, desired: StreamSetDesired, vst: VstClient,
                   ids: dict[str, str]) -> dict[str, str]:
        """Wait (with backoff) until VST publishes every sensor's ``/live/`` URL."""
        assert desired.streamset.spec.vst is not None
        budget = desired.streamset.spec.vst.urlTimeoutSeconds
        urls: dict[str, str] = {}

        def missing() -> list[str]:
            return sorted(set(ids) - set(urls))

        def all_published() -> bool | None:
            for name, sensor in ids.items():
                if name not in urls and (url := vst.live_url(sensor)) is not None:
                    urls[name] = url
            return True if not missing() else None
        if until(all_published, timeout_s=budget, stop=self.stop,
                 pace=tenacity.wait_exponential(multiplier=VST_POLL_FIRST_S,
                                                max=VST_POLL_MAX_S),
                 waiting=lambda _: self._progress(desired.resource, "waiting for VST /live/ "
                                                  f"URLs: {', '.join(missing())}")) is None:
            raise TemporaryError(f"VST has not published a /live/ URL for "
                                 f"{', '.join(missing())} within {budget:g}s")
        self._write(desired, facts={name: SourceFacts(sensor_id=ids[name], vst_url=url)
                                    for name, url in urls.items()})
        return urls

    def _register(self, desired: StreamSetDesired, urls: dict[str, str],
                  listed: dict[str, StreamInfo] | None = None) -> set[str]:
        """Make RTVI's stream list match: add missing IDs, replace IDs with a stale URL (their
        captions stopped first, as for any delete). ``listed``: RTVI's streams as this pass's
        plan just saw them (nothing removed since), else they are listed now. Returns the
        sources it (re-)added: their frames must be proven again, whatever was recorded."""
        if listed is None:
            rtvi = self._rtvi(desired.rtvi_url)
            try:
                listed = {s.id: s for s in rtvi.list_streams()}
            finally:
                rtvi.close()
        stale = [s for s in desired.sources.values()
                 if s.stream_id in listed and listed[s.stream_id].url != urls[s.name]]
        if stale:
            teardown = desired.streamset.spec.teardown
            items = [InventoryItem(kind=KIND_STREAM, name=s.name, id=s.stream_id,
                                   host=desired.deployment.metadata.name, state="created",
                                   created_at=utc_now()) for s in stale]
            left = self._teardown.streams(desired.resource, items, desired.rtvi_url,
                                          teardown.drainTimeoutSeconds,
                                          time.monotonic() + teardown.deadlineSeconds)
            if left:
                raise TemporaryError("could not replace streams with a stale URL: "
                                     + "; ".join(left))
        wanted = [s for s in desired.sources.values() if s.stream_id not in listed or s in stale]
        # Write-ahead: every stream about to be added is on record before the first add call.
        self._write(desired, [InventoryItem(kind=KIND_STREAM, name=src.name,
                                            host=desired.deployment.metadata.name,
                                            id=src.stream_id, created_at=utc_now())
                              for src in wanted])
        rtvi = self._rtvi(desired.rtvi_url)
        try:
            busy, failed, retry = self._add(desired, rtvi, wanted, urls)
        finally:
            rtvi.close()
        self._write(desired, facts={src.name: SourceFacts(
            hash=src.hash, rtvi_url=urls[src.name], stream_id=src.stream_id,
            spec=src.spec.model_dump(mode="json", exclude_defaults=True),
            registered=src.name not in busy and src.name not in failed and src.name not in retry)
            for src in desired.sources.values()})
        if failed:
            raise PermanentError("RTVI refused " + "; ".join(failed[n] for n in sorted(failed)))
        if busy:
            raise AtCapacity(f"RTVI is at capacity (503 ServerBusy); waiting to register "
                             f"{', '.join(sorted(busy))}")
        if retry:
            raise TemporaryError("; ".join(retry[n] for n in sorted(retry)))
        return {src.name for src in wanted}

    def _add(self, desired: StreamSetDesired, rtvi: RtviClient, wanted: list[DesiredSource],
             urls: dict[str, str]) -> tuple[set[str], dict[str, str], dict[str, str]]:
        """Add in batches of ≤256; then list again: a stream counts as registered only when
        RTVI lists it with our URL. Returns (busy, refused, retry) by source name."""
        busy, failed = _add_batches(rtvi, wanted, urls)
        if not wanted:
            return busy, failed, {}
        listed = {s.id: s for s in rtvi.list_streams()}
        retry: dict[str, str] = {}
        created: list[InventoryItem] = []
        for src in wanted:
            if src.name in busy or src.name in failed:
                continue
            got = listed.get(src.stream_id)
            if got is not None and got.url == urls[src.name]:
                created.append(InventoryItem(
                    kind=KIND_STREAM, name=src.name, id=src.stream_id, state="created",
                    host=desired.deployment.metadata.name, created_at=utc_now()))
            elif got is not None:
                failed[src.name] = (f"{src.name}: RTVI lists stream {src.stream_id} with "
                                    f"another URL ({redact_urls(got.url)})")
            else:  # accepted (or "duplicate") but not listed: bookkeeping may lag; retry
                retry[src.name] = f"{src.name}: RTVI does not list stream {src.stream_id} yet"
        self._write(desired, created)
        return busy, failed, retry

    # --- verify --------------------------------------------------------------------------------

    def _verify(self, desired: StreamSetDesired, urls: dict[str, str], deadline: float,
                waiting: bool, known: ResourceStatus | None = None) -> StreamSetResult:
        """Frames fresh on every source (and captions arriving, when captioning). ``known``:
        the record as just read, whose recent frame proofs may be trusted (see below)."""
        captions = desired.streamset.spec.captions
        model = self._model(desired) if captions is not None else ""
        if captions is None:  # captioning switched off: end any session still open
            self._end_captions(desired)
        result = StreamSetResult({n: SourceReport(n) for n in desired.sources})

        def say_proving(st: ResourceStatus) -> None:
            st.set_condition("Progressing", "True", VERIFYING, fresh_summary(result))
        if known is not None:
            self._trust_recorded_frames(desired, result, known)
        if waiting:  # the first round alone can take minutes when many sets prove at once
            self._write(desired, then=say_proving)

        def healthy() -> StreamSetResult | None:
            frames = _probe_pending(result, urls, deadline)
            self._write(desired, facts=frames, then=say_proving if waiting else None)
            if captions is not None:
                self._captions(desired, model, result)
            bad = unhealthy(result, captions is not None, captions.maxCaptionAgeSeconds
                             if captions is not None else 0.0)
            if not bad:
                return result
            # A caption session opened by this process has had no chunk yet: give it until
            # the deadline, as for sources just (re)registered.
            first = any(r.caption is not None and r.caption.at is None
                        for r in result.sources.values())
            if not (waiting or first) or time.monotonic() + VERIFY_POLL_S > deadline:
                self._record_sources(desired, result)
                raise SourcesDegraded(degraded_message(bad, result), sorted(bad))
            return None
        # healthy() itself raises once the deadline is near: the budget here is a backstop.
        done = until(healthy, timeout_s=max(0.0, deadline - time.monotonic()) + VERIFY_POLL_S,
                     pace=VERIFY_POLL_S, stop=self.stop)
        if done is None:
            raise SourcesDegraded("sources not verified in time", sorted(result.sources))
        return done

    def _end_captions(self, desired: StreamSetDesired) -> None:
        for src in desired.sources.values():
            self.hub.forget_stream(src.stream_id)

    def _trust_recorded_frames(self, desired: StreamSetDesired, result: StreamSetResult,
                               record: ResourceStatus) -> None:
        """Sources proven fresh at this very spec and URL, recently (by the watch or a pass):
        within the frame budget, or TRUST_PROOF_S when one watch round takes longer than that.
        An older proof (a restart after hours, a watch that fell behind) is probed again."""
        window = max(desired.streamset.spec.readiness.maxFrameAgeSeconds, TRUST_PROOF_S)
        now = time.time()
        for name, fact in recorded_sources(record).items():
            src = desired.sources.get(name)
            if (src is not None and fact.frames_fresh and fact.registered
                    and fact.hash == src.hash and age_s(fact.last_frame_at, now) <= window):
                report = result.sources[name]
                report.fresh, report.frame, report.trusted = True, fact.frame or "", True

    def _captions(self, desired: StreamSetDesired, model: str, result: StreamSetResult) -> None:
        captions = desired.streamset.spec.captions
        assert captions is not None
        for src in desired.sources.values():
            body: dict[str, Any] = {"id": src.stream_id, "prompt": captions.prompt,
                                    "model": model, "stream": True,
                                    "stream_options": {"include_usage": True},
                                    "max_tokens": captions.maxTokens,
                                    "chunk_duration": captions.chunkDuration,
                                    "chunk_overlap_duration": captions.chunkOverlapDuration}
            if captions.temperature is not None:
                body["temperature"] = captions.temperature
            if captions.seed is not None:
                body["seed"] = captions.seed
            result.sources[src.name].caption = self.hub.ensure(
                desired.rtvi_url, src.stream_id, body, self._clients.token(desired.rtvi_url))

    def _model(self, desired: StreamSetDesired) -> str:
        rtvi = self._rtvi(desired.rtvi_url)
        try:
            return rtvi.model_id()
        finally:
            rtvi.close()

    # --- teardown ------------------------------------------------------------------------------

    def teardown(self, resource: Key, names: list[str], rtvi_url: str | None,
                 drain_timeout_s: int, deadline_s: int) -> list[str]:
        """Remove the named sources in contract order; returns what is left, with reasons."""
        return self._teardown.sources(resource, names, rtvi_url, drain_timeout_s, deadline_s)

    # --- recording -----------------------------------------------------------------------------

    def _engine_for(self, host: str) -> DockerEngine:
        return self._session_for(host).engine()

    def _rtvi(self, url: str) -> RtviClient:
        return self._clients.get(RtviClient, url, self._count)

    def _vst(self, url: str) -> VstClient:
        return self._clients.get(VstClient, url, self._count)

    def _update(self, resource: Key, mutate: Callable[[ResourceStatus], None],
                known: ResourceStatus | None = None) -> None:
        """One write of this StreamSet's record; none when ``known`` already says it (see
        ``Store.update_unless_known``)."""
        self.store.update_unless_known(resource, mutate,
                                       known)

    def _inventory(self, desired: StreamSetDesired, item: InventoryItem) -> None:
        self._write(desired, [item])

    def _write(self, desired: StreamSetDesired, items: list[InventoryItem] | None = None,
               facts: dict[str, SourceFacts] | None = None,
               then: Callable[[ResourceStatus], None] | None = None,
               known: ResourceStatus | None = None) -> None:
        """One status write for a step: inventory entries, the facts each source gained (only
        the facts set in each ``SourceFacts`` are merged in), then ``then``. Nothing to say, no
        write; nothing ``known`` (see ``Store.update_unless_known``) lacks, no write either."""
        mutate = _mutation(items, facts, then)
        if mutate is not None:
            self._update(desired.resource, mutate, known)

    def _record_desired(self, desired: StreamSetDesired, the_plan: StreamPlan) -> None:
        """What is desired, and, when the plan changes something, that it is being applied:
        registering and proving ~50 sources can take minutes, and ``status`` must not go on
        showing the last pass's verdict (say, waiting for the Deployment) meanwhile."""
        def mutate(st: ResourceStatus) -> None:
            if the_plan.actions:
                st.set_condition("Progressing", "True", APPLYING, change_summary(the_plan))
            st.desired_generation = desired.spec_hash
            st.source_file = desired.source_file
            known = StreamSetStatusFacts.of(st)
            known.deployment, known.rtvi = desired.deployment.metadata.name, desired.rtvi_url
            known.vst, known.host = desired.vst_url, desired.publisher_host
            known.max_frame_age_seconds = desired.streamset.spec.readiness.maxFrameAgeSeconds
            known.put(st)
        self._update(desired.resource, mutate, the_plan.record)

    def _record_sources(self, desired: StreamSetDesired, result: StreamSetResult) -> None:
        self._write(desired, facts=_source_facts(result))

    def _ready_facts(self, desired: StreamSetDesired, result: StreamSetResult,
                     revision: str | None) -> Callable[[ResourceStatus], None]:
        """What a pass that found every source fresh says of the StreamSet: the engine writes
        it with the Ready verdict, in the pass's one write (``controllers.passstatus``)."""
        def generation(st: ResourceStatus) -> None:
            st.observed_generation = desired.spec_hash
            st.applied_revision = revision or st.applied_revision
            st.applied_spec = desired.streamset.spec.model_dump(mode="json")
        mutate = _mutation(None, _source_facts(result), generation)
        assert mutate is not None  # ``then`` is always given
        return mutate

    def _history(self, desired: StreamSetDesired, the_plan: StreamPlan,
                 revision: str | None) -> None:
        def mutate(st: ResourceStatus) -> None:
            for action in the_plan.actions:
                st.add_history(HistoryEntry(time=utc_now(), action=action.verb,
                                            target=action.target, cause=action.cause,
                                            result="ok", revision=revision))
        if the_plan.actions:
            self._update(desired.resource, mutate)
            for action in the_plan.actions:
                self.store.events.append(desired.resource, "Normal", _event_reason(action.verb),
                                         str(action))


def change_summary(the_plan: StreamPlan) -> str:
    """``applying 3 change(s): register 2, remove 1``, verbs in the order they first appear."""
    counts = Counter(action.verb for action in the_plan.actions)
    return (f"applying {len(the_plan.actions)} change(s): "
            + ", ".join(f"{verb} {n}" for verb, n in counts.items()))


def fresh_summary(result: StreamSetResult) -> str:
    """``proving frames: 3 of 4 source(s) fresh so far; waiting on yellow (no frame from
    ...)``: a wait of minutes says what it waits on, the first few sources with their error."""
    fresh = sum(1 for r in result.sources.values() if r.fresh)
    said = f"proving frames: {fresh} of {len(result.sources)} source(s) fresh so far"
    waiting = [r for r in result.sources.values() if not r.fresh]
    if not waiting:
        return said
    named = [f"{r.name} ({shorten(r.error, WHY_CHARS, placeholder=' ...')})" if r.error
             else r.name for r in waiting[:NAMED_WAITING]]
    more = f" and {len(waiting) - NAMED_WAITING} more" if len(waiting) > NAMED_WAITING else ""
    return f"{said}; waiting on {', '.join(named)}{more}"


def _event_reason(verb: str) -> str:
    return {"remove": "SourceRemoved", "replace": "SourceReplaced", "publish": "Published",
            "register-sensor": "SensorRegistered", "register": "StreamRegistered"}[verb]


def _add_batches(rtvi: RtviClient, wanted: list[DesiredSource], urls: dict[str, str]
                 ) -> tuple[set[str], dict[str, str]]:
    """Add ``wanted`` in batches of ≤256: (busy, refused) by source name. A duplicate is not
    a refusal: whether RTVI lists it with our URL is checked after."""
    by_id = {s.stream_id: s for s in wanted}
    busy: set[str] = set()
    failed: dict[str, str] = {}
    for i in range(0, len(wanted), MAX_BATCH):
        batch = wanted[i:i + MAX_BATCH]
        entries = [{"liveStreamUrl": urls[s.name], "description": s.description,
                    "id": s.stream_id} for s in batch]
        try:
            result = rtvi.add_streams(entries)
        except RtviBusy:
            busy.update(s.name for s in batch)
            continue
        for err in result.errors:
            src = by_id.get(err.id)
            if src is not None and err.busy:
                busy.add(src.name)
            elif src is not None and not err.duplicate:
                failed[src.name] = f"{src.name}: {err.code or err.status} {err.message}"
    return busy, failed


def _probe_pending(result: StreamSetResult, urls: dict[str, str], deadline: float
                   ) -> dict[str, SourceFacts]:
    """Probe every source not yet fresh, into ``result``; the facts each one gained (a frame,
    or the error that says why there is none yet)."""
    pending = [n for n, r in result.sources.items() if not r.fresh]
    # Probes run MAX_PARALLEL at a time under one deadline: give every wave its time.
    waves = -(-len(pending) // MAX_PARALLEL)
    timeout = max(1.0, min(STEADY_PROBE_TIMEOUT_S * waves, deadline - time.monotonic()))
    samples = probe_many([urls[n] for n in pending], timeout)
    frames: dict[str, SourceFacts] = {}
    for name in pending:
        report, sample = result.sources[name], samples[urls[name]]
        if isinstance(sample, ControllerError):
            # Written while the pass waits: `status` says why a source is not proven yet.
            report.error = str(sample)
            frames[name] = SourceFacts(frames_fresh=False, error=report.error)
        else:
            report.fresh, report.frame, report.error = True, sample.description, ""
            frames[name] = SourceFacts(last_frame_at=utc_now(), frame=sample.description)
    return frames


def _source_facts(result: StreamSetResult) -> dict[str, SourceFacts]:
    """The facts each source gained in a pass. A trusted source's freshness is the watch's to
    record: writing it again here would overwrite a failure the watch found meanwhile, and
    keep the trust alive by itself."""
    return {name: (caption_facts(report.caption) if report.caption else SourceFacts()).merged(
        SourceFacts() if report.trusted else
        SourceFacts(frames_fresh=report.fresh, error=report.error))
        for name, report in result.sources.items()}


def _mutation(items: list[InventoryItem] | None, facts: dict[str, SourceFacts] | None,
              then: Callable[[ResourceStatus], None] | None
              ) -> Callable[[ResourceStatus], None] | None:
    """Inventory entries, the facts each source gained (only the facts set in each
    ``SourceFacts`` are merged in), then ``then``; None when there is nothing to say."""
    if not items and not facts and then is None:
        return None

    def mutate(st: ResourceStatus) -> None:
        for item in items or []:
            st.upsert_inventory(item)
        if facts:
            recorded = StreamSetStatusFacts.of(st)
            for name, new in facts.items():
                recorded.sources[name] = (recorded.sources.get(name)
                                          or SourceFacts()).merged(new)
            recorded.put(st)
        if then is not None:
            then(st)
    return mutate
