"""Frames of Ready StreamSets, re-proved beside the work queue at a bounded rate.

A StreamSet proves its frames (one decoded frame per source) whenever it changed. Proving them
again on every periodic pass made a resync over 20 StreamSets of 49 sources start 980 ffmpeg
processes (two minutes on two cores, with the daemon's workers busy all along). Instead, while
the daemon runs, this watch re-proves them in the background: oldest proof first, at most
``PARALLEL`` probes at a time, each source at most once per its ``maxFrameAgeSeconds``. A
steady-state pass then trusts the recorded proof (``StreamSetController(frames_watched=True)``).

When a source that was fresh stops giving frames, the watch records it (``framesFresh`` false,
with the error) and wakes the StreamSet, whose next pass probes that source itself and reports
it Degraded (or repairs its publisher). At a size where one round takes longer than the frame
budget, ``status`` shows the true age of each proof: the watch never claims more than it saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from controllers.errors import ControllerError
from controllers.kinds.streamset.facts import SourceFacts, StreamSetStatusFacts
from controllers.kinds.streamset.frames import ProbeSlotsBusy, probe_many
from state.errors import StateFenced
from state.keys import Key
from state.models import ResourceStatus, utc_now
from state.store import Store

PARALLEL = 2
"""Probes the watch runs at once: the daemon's own passes keep the rest of the machine. One
round reads the records once and writes each StreamSet's once, however many sources it has."""
ROUND_PAUSE_S = 1.0
"""Shortest pause between rounds when nothing was due."""
MAX_IDLE_S = 5.0
"""Longest pause: a StreamSet that turns Ready meanwhile is watched within this."""
TRUST_PROOF_S = 300.0
"""How old a recorded proof a steady-state pass still trusts when the frame budget is shorter:
one round of the watch over a thousand sources takes minutes on a small machine."""
PROBE_TIMEOUT_S = 5.0  # under the daemon's shutdown timeout: SIGTERM never waits on it long
DEFAULT_MAX_AGE_S = 15.0


def age_s(stamp: str | None, now: float) -> float:
    """Seconds since an ISO-8601 stamp (infinite for none or a malformed one)."""
    if not stamp:
        return float("inf")
    try:
        return now - datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(
            UTC).timestamp()
    except ValueError:
        return float("inf")


def _watched(record: ResourceStatus, now: float) -> list[tuple[float, float, str, str]]:
    """(age, budget, source, URL) of each fresh, registered source of a StreamSet record."""
    if record.kind != "StreamSet":
        return []
    known = StreamSetStatusFacts.of(record)
    budget = known.max_frame_age_seconds or DEFAULT_MAX_AGE_S
    return [(age_s(src.last_frame_at, now), budget, name, src.rtvi_url)
            for name, src in known.sources.items()
            if src.registered and src.frames_fresh and src.rtvi_url]


def idle_s(records: list[ResourceStatus], now: float) -> float:
    """How long the watch may rest before the next proof falls due (ROUND_PAUSE_S to
    MAX_IDLE_S): a thousand records are not read every second for nothing. Pure."""
    waits = [budget - age for record in records for age, budget, _, _ in _watched(record, now)]
    return min(MAX_IDLE_S, max(ROUND_PAUSE_S, min(waits, default=MAX_IDLE_S)))


def due(records: list[ResourceStatus], now: float) -> list[tuple[str, str, str]]:
    """(resource, source, URL) of every fresh, registered source of a StreamSet whose proof is
    older than its ``maxFrameAgeSeconds``, oldest first. A StreamSet that is not Ready is
    watched too: its passes probe only the sources already failing. Pure."""
    found: list[tuple[float, str, str, str]] = []
    for record in records:
        found += [(age, record.resource, name, url)
                  for age, budget, name, url in _watched(record, now) if age >= budget]
    found.sort(key=lambda item: -item[0])
    return [(resource, name, url) for _, resource, name, url in found]


class FrameWatch:
    """Runs in the daemon (``run`` until ``stop``); ``wake`` re-queues a StreamSet."""

    def __init__(self, store: Store, wake: Callable[[Key], None],
                 mine: Callable[[Key], bool] = lambda _key: True) -> None:
        self.store, self.wake, self.mine = store, wake, mine

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            rest = self.round(stop)
            if rest and stop.wait(rest):
                return

    def round(self, stop: threading.Event | None = None) -> float:
        """Re-prove every due source, one StreamSet after another (the one with the oldest
        proof first), ``PARALLEL`` probes at a time; each StreamSet's record is written once,
        after its sources, and a StreamSet with a stopped source is woken. Returns how long
        to rest before the next round (0: go on at once)."""
        records, _ = self.store.scan("StreamSet")  # a broken record is the pass's to report
        records = [r for r in records if self.mine(r.key)]  # another replica's: its own watch
        batch = due(records, time.time())
        if not batch:
            return idle_s(records, time.time())
        by_set: dict[Key, list[tuple[str, str]]] = {}
        for resource, name, url in batch:
            by_set.setdefault(Key.parse(resource), []).append((name, url))
        for resource, sources in by_set.items():
            if stop is not None and stop.is_set():
                break
            found: dict[tuple[str, str], SourceFacts] = {}
            for i in range(0, len(sources), PARALLEL):
                chunk = sources[i:i + PARALLEL]
                samples = probe_many([url for _, url in chunk], PROBE_TIMEOUT_S,
                                     background=True)
                for name, url in chunk:
                    sample = samples[url]
                    if isinstance(sample, ProbeSlotsBusy):
                        continue  # nothing learnt about the source: the next round asks again
                    found[(name, url)] = (SourceFacts(frames_fresh=False, error=str(sample))
                                          if isinstance(sample, ControllerError) else
                                          SourceFacts(last_frame_at=utc_now(),
                                                      frame=sample.description))
            try:
                if self._record(resource, found):
                    self.wake(resource)
            except StateFenced:  # its share moved to another replica mid-round: theirs now
                continue
        return 0.0

    def _record(self, resource: Key, found: dict[tuple[str, str], SourceFacts]) -> bool:
        """Merge what the round learnt; True when a source it recorded has stopped. A source
        removed or re-registered (another URL) since it was probed is left to its pass."""
        stopped = False

        def mutate(st: ResourceStatus) -> None:
            nonlocal stopped
            known = StreamSetStatusFacts.of(st)
            for (name, url), new in found.items():
                old = known.sources.get(name)
                if old is not None and old.registered and old.rtvi_url == url:
                    known.sources[name] = old.merged(new)
                    stopped = stopped or new.frames_fresh is False
            known.put(st)
        self.store.update(resource, mutate, create=False)
        return stopped
