"""Tearing StreamSet sources down, in the contract's order, without losing track of anything.

Order (contracts/rtvi-api.md, vst-api.md): stop caption requests → delete RTVI streams (one
blocking batch per ≤256 IDs, all under one shared deadline, ``ResourceInUse`` retried with
backoff, absence verified by listing) → VST sensors → publishers. A source's sensor and
publisher go only once its RTVI stream is confirmed gone: deleting upstream first "leaves the
consumers provisioned". Every step's failure becomes a line in the returned leftovers (and the
item stays in the inventory for the next pass); nothing is dropped silently.

Each item is removed where it was created: a sensor at the VST URL recorded in its inventory
entry, a publisher on the Host recorded in its entry -- not wherever the current spec points.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import tenacity

from controllers.clients.docker_client import DockerEngine
from controllers.clients.rtvi_client import MAX_BATCH, BatchResult, RtviClient
from controllers.clients.vst_client import VstClient
from controllers.errors import ControllerError
from controllers.kinds.streamset import publishing
from controllers.kinds.streamset.captions import CaptionHub
from controllers.kinds.streamset.facts import StreamSetStatusFacts
from controllers.kinds.streamset.plan import KIND_PUBLISHER, KIND_SENSOR, KIND_STREAM, sensor_name
from controllers.waiting import Stopped, until
from state.keys import Key
from state.models import InventoryItem, Owner, ResourceStatus
from state.store import Store

LIST_POLL_S = 0.5
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 8.0
PARALLEL_REMOVALS = 8  # each waits on the engine
Progress = Callable[[str, str], None]


class Teardown:
    """Removes sources of one StreamSet; ``engine_for`` maps a Host name to its engine."""

    def __init__(self, store: Store, instance: Owner, hub: CaptionHub,
                 engine_for: Callable[[str], DockerEngine], progress: Progress,
                 rtvi: Callable[[str], RtviClient], vst: Callable[[str], VstClient],
                 stop: threading.Event | None = None) -> None:
        self.store, self.instance, self.hub = store, instance, hub
        self.stop = stop
        self._engine_for, self._progress = engine_for, progress
        self._rtvi, self._vst = rtvi, vst

    def sources(self, resource: Key, names: list[str], rtvi_url: str | None,
                drain_timeout_s: int, deadline_s: int) -> list[str]:
        """Remove the named sources; returns what is left, one line each, naming the source.
        ``rtvi_url`` None: the service is gone, and its streams went with it."""
        deadline = time.monotonic() + deadline_s
        record = self.store.load(resource)
        if record is None:
            return []
        items = [i for i in record.inventory if i.name in names]
        streams = [i for i in items if i.kind == KIND_STREAM and i.id]
        left = self.streams(resource, streams, rtvi_url, drain_timeout_s, deadline)
        blocked = {line.split(":", 1)[0] for line in left}
        downstream = [i for i in items if i.kind != KIND_STREAM and i.name not in blocked]
        left += [f"{i.name}: {i.kind} kept: its RTVI stream is still registered"
                 for i in items if i.kind != KIND_STREAM and i.name in blocked]
        left += self._sensors(resource, [i for i in downstream if i.kind == KIND_SENSOR])
        left += self._publishers(resource, [i for i in downstream if i.kind == KIND_PUBLISHER])
        self._drop_facts(resource, [n for n in names
                                    if not any(line.startswith(f"{n}:") for line in left)])
        return left

    def streams(self, resource: Key, streams: list[InventoryItem], rtvi_url: str | None,
                drain_timeout_s: int, deadline: float) -> list[str]:
        """Stop captions, then delete the streams; forget those confirmed gone."""
        for item in streams:
            self.hub.forget_stream(str(item.id))
        if not streams:
            return []
        if rtvi_url is None:
            for item in streams:
                self._forget(resource, item)
            return []
        rtvi = self._rtvi(rtvi_url)
        try:
            for item in streams:
                # Any failure here shows up below as ResourceInUse, which is retried.
                with contextlib.suppress(ControllerError):
                    rtvi.stop_captions(str(item.id))
            self._progress(resource, f"deleting {len(streams)} RTVI stream(s) "
                                     f"(drain timeout {drain_timeout_s}s)")
            still = set(delete_streams(rtvi, [str(i.id) for i in streams], drain_timeout_s,
                                       self.stop,
                                       deadline))
        except Stopped:
            raise  # shutting down: nothing failed, the next pass goes on from the record
        except ControllerError as exc:
            return [f"{i.name}: RTVI stream {i.id} not deleted ({exc})" for i in streams]
        finally:
            rtvi.close()
        for item in streams:
            if item.id not in still:
                self._forget(resource, item)
        return [f"{i.name}: RTVI stream {i.id} still listed after the deadline"
                for i in streams if i.id in still]

    def _sensors(self, resource: Key, sensors: list[InventoryItem]) -> list[str]:
        left = []
        for item in sensors:
            vst = self._vst(item.host)  # the VST it was registered with
            try:
                ids = [item.id] if item.id else adoptable(vst, sensor_name_of(resource, item,
                                                                              self.instance))
                for sensor_id in ids:
                    vst.delete_sensor(sensor_id)
                self._forget(resource, item)
            except ControllerError as exc:
                left.append(f"{item.name}: VST sensor {item.id or '(pending)'} not deleted "
                            f"({exc})")
            finally:
                vst.close()
        return left

    def _publishers(self, resource: Key, publishers: list[InventoryItem]) -> list[str]:
        def remove(item: InventoryItem) -> str | None:
            try:
                return publishing.remove(self._engine_for(item.host), self.instance, resource,
                                         item)
            except ControllerError as exc:
                return f"publisher not removed ({exc})"
        with ThreadPoolExecutor(max_workers=PARALLEL_REMOVALS) as pool:
            problems = list(pool.map(remove, publishers))
        left = []
        for item, problem in zip(publishers, problems, strict=True):
            if problem:
                left.append(f"{item.name}: {problem}")
            else:
                self._forget(resource, item)
        return left

    def _update(self, resource: Key, mutate: Callable[[ResourceStatus], None]) -> None:
        self.store.update(resource, mutate)

    def _forget(self, resource: Key, item: InventoryItem) -> None:
        self._update(resource, lambda st: st.remove_inventory(item.kind, item.name))

    def _drop_facts(self, resource: Key, names: list[str]) -> None:
        def mutate(st: ResourceStatus) -> None:
            known = StreamSetStatusFacts.of(st)
            if any(name in known.sources for name in names):
                known.sources = {n: f for n, f in known.sources.items() if n not in names}
                known.put(st)
        self._update(resource, mutate)


def sensor_name_of(resource: Key, item: InventoryItem, instance: str) -> str:
    return sensor_name(instance, resource.name, item.name)


def adoptable(vst: VstClient, name: str) -> list[str]:
    """Sensors carrying our deterministic name: what a crash between "VST created it" and
    "we recorded its ID" left behind (the pending inventory entry licenses adopting them)."""
    return [s.id for s in vst.list_sensors() if s.name == name and s.state != "removed"]


def delete_streams(rtvi: RtviClient, ids: list[str], drain_timeout_s: int,
                   stop: threading.Event | None, deadline: float) -> list[str]:
    """Blocking batch deletes (≤256 IDs each, batches in parallel) until every ID is absent
    from the list or the shared deadline passes; returns the IDs still listed.

    Per-stream 400/404 means already gone. ``ResourceInUse`` (and any other per-stream error)
    is asked again after a growing pause -- never in a tight loop. The drain timeout sent is
    cut to the time left, so the whole teardown keeps one deadline. ``stop`` ends every
    pause at once (Stopped)."""
    remaining = list(dict.fromkeys(ids))

    def one_round() -> list[str] | None:
        nonlocal remaining
        drain = max(0, min(drain_timeout_s, int(deadline - time.monotonic())))
        batches = [remaining[i:i + MAX_BATCH] for i in range(0, len(remaining), MAX_BATCH)]
        with ThreadPoolExecutor(max_workers=len(batches)) as pool:
            results: list[BatchResult] = list(pool.map(
                rtvi.delete_batch, batches, [drain] * len(batches)))
        refused = {e.id for r in results for e in r.errors if not e.gone}

        def settled() -> list[str] | None:  # the call can return before bookkeeping drains
            listed = {s.id for s in rtvi.list_streams()}
            still = [sid for sid in remaining if sid in listed]
            return still if all(sid in refused for sid in still) else None
        left = max(0.0, deadline - time.monotonic())
        still = until(settled, timeout_s=left, pace=LIST_POLL_S, stop=stop)
        if still is None:
            listed = {s.id for s in rtvi.list_streams()}
            still = [sid for sid in remaining if sid in listed]
        remaining = still
        return [] if not remaining else None  # refused or not drained yet: pause, ask again
    # Whatever the pace, the rounds share the one deadline.
    done = until(one_round, timeout_s=max(0.0, deadline - time.monotonic()),
                 pace=tenacity.wait_exponential(multiplier=RETRY_FIRST_S, max=RETRY_MAX_S),
                 stop=stop)
    return [] if done is not None else remaining
