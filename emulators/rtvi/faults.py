"""Injected faults: HTTP faults by path prefix, and behaviour faults for canary tests.

Why: the reconciler's retry, backoff and "a failed list is an error, never 'no streams'" rules
are only testable against a service that fails on cue. Faults apply to the service API (never to
``/emulator/`` admin paths, so a test can always undo what it set up). A random failure rate
(``RTVI_EMU_FAIL_RATE``) applies to ``/v1/`` paths except health, so orchestration probes stay
meaningful while the API is flaky.

Behaviour faults (``BehaviourFault``) make a 200 answer wrong in the ways a canary must catch;
each holds until ``DELETE /emulator/faults``:

- ``swap_captions`` (two streams): each stream's chunks describe the other stream's frames.
- ``mix_captions`` (two streams): odd chunks describe the other stream's frames (alternating).
- ``drop_chunk_ids`` (``skip`` >= 1, optional streams): ``chunk_id`` advances by ``skip + 1`` per
  chunk, so ``skip`` IDs are missing after each one (0, 2, 4, ... for ``skip`` 1).
- ``error_in_event`` (optional streams): each caption event carries ``"error": {"code",
  "message"}`` with empty ``content``, inside an HTTP 200.
- ``empty_content`` (optional streams): each chunk's ``content`` is ``""``.
- ``stuck_delete`` (streams): deleting the stream answers 409 ``ResourceInUse`` (a batch reports
  it in ``errors``; ``/v1/stream/remove`` answers 409), forever.
- ``crosstalk`` (optional streams): each stream's chunks describe the frames of the next live
  stream (by ID, in a ring): a release that mixes streams' answers, named by no stream ID, so
  it can be baked into an image or set before the streams exist.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass

from emulators.rtvi.routing import Response

ADMIN_PREFIX = "/emulator/"
HEALTH_PREFIXES = ("/v1/health/", "/v1/ready", "/v1/live", "/v1/startup")
INJECTED_CODE = "InternalServerError"


@dataclass
class FaultRule:
    path_prefix: str
    remaining: int
    status: int | None  # None: delay only
    delay_s: float


@dataclass(frozen=True)
class FaultDecision:
    delay_s: float
    response: Response | None


BEHAVIOUR_KINDS = (
    "swap_captions",
    "mix_captions",
    "drop_chunk_ids",
    "error_in_event",
    "empty_content",
    "stuck_delete",
    "crosstalk",
)
PAIRED_KINDS = ("swap_captions", "mix_captions")


@dataclass(frozen=True)
class BehaviourFault:
    kind: str
    streams: tuple[str, ...] = ()  # pair for swap/mix; a filter (empty: every stream) otherwise
    skip: int = 1  # drop_chunk_ids only

    def applies(self, stream_id: str) -> bool:
        return not self.streams or stream_id in self.streams

    def partner(self, stream_id: str) -> str | None:
        if self.kind in PAIRED_KINDS and stream_id in self.streams:
            first, second = self.streams
            return second if stream_id == first else first
        return None


class FaultTable:
    """Rules in order of registration; a request consumes every rule whose prefix it matches."""

    def __init__(self, fail_rate: float, seed: int | None) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._behaviours: list[BehaviourFault] = []
        self._fail_rate = fail_rate
        self._random = random.Random(seed)
        self.injected_total = 0

    def add(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules.append(rule)

    def add_behaviour(self, fault: BehaviourFault) -> None:
        with self._lock:
            self._behaviours.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._behaviours.clear()

    def rules(self) -> list[dict[str, object]]:
        with self._lock:
            listed = [asdict(rule) for rule in self._rules]
            for fault in self._behaviours:
                listed.append({**asdict(fault), "streams": list(fault.streams)})
            return listed

    def _active(self, kind: str, stream_id: str) -> list[BehaviourFault]:
        with self._lock:
            return [f for f in self._behaviours if f.kind == kind and f.applies(stream_id)]

    def frames_source(self, stream_id: str, chunk_index: int, live: list[str] | None = None
                      ) -> str:
        """Whose frames stream ``stream_id``'s chunk ``chunk_index`` describes (``live``: the
        IDs of the streams registered now)."""
        ring = sorted(live or [])
        if self._active("crosstalk", stream_id) and stream_id in ring and len(ring) > 1:
            return ring[(ring.index(stream_id) + 1) % len(ring)]
        for fault in self._active("swap_captions", stream_id):
            partner = fault.partner(stream_id)
            if partner is not None:
                return partner
        for fault in self._active("mix_captions", stream_id):
            partner = fault.partner(stream_id)
            if partner is not None and chunk_index % 2 == 1:
                return partner
        return stream_id

    def chunk_id(self, stream_id: str, chunk_index: int) -> int:
        step = 1 + sum(f.skip for f in self._active("drop_chunk_ids", stream_id))
        return chunk_index * step

    def event_error(self, stream_id: str) -> bool:
        return bool(self._active("error_in_event", stream_id))

    def empty_content(self, stream_id: str) -> bool:
        return bool(self._active("empty_content", stream_id))

    def stuck(self, stream_id: str) -> bool:
        with self._lock:
            return any(f.kind == "stuck_delete" and stream_id in f.streams
                       for f in self._behaviours)

    def decide(self, path: str) -> FaultDecision:
        if path.startswith(ADMIN_PREFIX):
            return FaultDecision(0.0, None)
        delay = 0.0
        status: int | None = None
        with self._lock:
            for rule in self._rules:
                if path.startswith(rule.path_prefix) and rule.remaining > 0:
                    rule.remaining -= 1
                    delay += rule.delay_s
                    status = status or rule.status
            self._rules = [rule for rule in self._rules if rule.remaining > 0]
            if (
                status is None
                and self._fail_rate > 0
                and path.startswith("/v1/")
                and not path.startswith(HEALTH_PREFIXES)
                and self._random.random() < self._fail_rate
            ):
                status = 500
            if status is not None:
                self.injected_total += 1
        if status is None:
            return FaultDecision(delay, None)
        return FaultDecision(
            delay, Response.error(status, INJECTED_CODE, f"injected fault ({status})")
        )
