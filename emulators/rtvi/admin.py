"""Emulator-only admin API under ``/emulator/`` -- never part of the real service.

Why an HTTP admin API rather than only environment knobs: tests must change capacity, inject
faults or crash the process while streams and caption requests are live, against one process.

- ``GET /emulator/state``: phase, knobs, streams (with decoder facts), caption requests, faults,
  and ``requests``: how many requests each route answered (``"POST /v1/streams/add": 3``), so a
  client's test can prove it made one batch call, or did not hammer a busy server.
- ``POST /emulator/knobs`` ``{"max_streams": int|null, "latency_ms", "latency_per_stream_ms",
  "drain_s", "caption_shape": "wrapped"|"flat", "legacy_delete": bool,
  "breach_above": int|null, "breach_ms", "jitter_ms", "answer_mode", "file_hang_s",
  "decode_delay_s", "ingest_delay_s", "delete_in_use": "end"|"refuse",
  "capacity_refusal": "503"|"in-200"}`` (any subset; answer modes: ``answers``; see ``config``
  for each) -> the new knob values.
- ``POST /emulator/faults`` ``{"path_prefix": "/v1/", "status": 500..599 (optional),
  "count": 1.., "delay_s": 0..600 (optional)}``: the next ``count`` requests under the prefix
  are delayed and/or answer ``status``. With ``"kind"`` it adds a behaviour fault instead
  (``faults``): ``{"kind": "swap_captions"|"mix_captions", "streams": [a, b]}``,
  ``{"kind": "drop_chunk_ids", "skip": 1.., "streams": [...] (optional)}``,
  ``{"kind": "error_in_event"|"empty_content"|"crosstalk", "streams": [...] (optional)}``,
  ``{"kind": "stuck_delete", "streams": [...]}``. ``DELETE /emulator/faults`` clears all.
- ``GET /emulator/exchanges`` -> ``{"recording": bool, "exchanges": [...]}`` (see ``recorder``;
  ``RTVI_EMU_RECORD``); ``DELETE /emulator/exchanges`` forgets the in-memory ones.
- ``POST /emulator/crash`` ``{"exit_code": 1..255}`` (default 3): answers 200, then kills every
  decoder and exits the process at once (``os._exit``), like a crashed container.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass

from emulators.rtvi import validation
from emulators.rtvi.cameras import BusConfig
from emulators.rtvi.captions import CaptionService
from emulators.rtvi.config import (
    ANSWER_MODES,
    CAPACITY_REFUSALS,
    CAPTION_SHAPES,
    DELETE_IN_USE,
)
from emulators.rtvi.faults import (
    BEHAVIOUR_KINDS,
    PAIRED_KINDS,
    BehaviourFault,
    FaultRule,
    FaultTable,
)
from emulators.rtvi.knobs import Knobs
from emulators.rtvi.recorder import Recorder
from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.state import ServiceState
from emulators.rtvi.streams import StreamTable
from emulators.rtvi.validation import Invalid

DEFAULT_CRASH_CODE = 3
CRASH_AFTER_S = 0.1  # lets the 200 reach the client first
MAX_DELAY_S = 600.0
MAX_SKIP = 1000
CHOICE_KNOBS = {"caption_shape": CAPTION_SHAPES, "answer_mode": ANSWER_MODES,
                "delete_in_use": DELETE_IN_USE, "capacity_refusal": CAPACITY_REFUSALS}
SECONDS_KNOBS = ("latency_ms", "latency_per_stream_ms", "drain_s", "breach_ms", "jitter_ms",
                 "file_hang_s", "decode_delay_s", "ingest_delay_s")
KNOB_KEYS = ("max_streams", "legacy_delete", "breach_above", *CHOICE_KNOBS, *SECONDS_KNOBS)


@dataclass(frozen=True)
class AdminParts:
    """What the admin API reads and changes."""

    knobs: Knobs
    streams: StreamTable
    captions: CaptionService
    faults: FaultTable
    recorder: Recorder
    bus: BusConfig


def parse_behaviour(body: dict[str, object]) -> BehaviourFault:
    validation.only_keys(body, ("kind", "streams", "skip"))
    kind = body["kind"]
    if kind not in BEHAVIOUR_KINDS:
        raise Invalid(f"kind: must be one of {', '.join(BEHAVIOUR_KINDS)}")
    raw = body.get("streams", [])
    if not isinstance(raw, list):
        raise Invalid("streams: expected a list of stream IDs")
    streams = tuple(dict.fromkeys(validation.uuid_text(i, "streams") for i in raw))
    if kind in PAIRED_KINDS and len(streams) != 2:
        raise Invalid(f"streams: {kind} needs two different stream IDs")
    if kind == "stuck_delete" and not streams:
        raise Invalid("streams: stuck_delete needs at least one stream ID")
    if "skip" in body and kind != "drop_chunk_ids":
        raise Invalid("skip: only for drop_chunk_ids")
    skip = validation.integer(body.get("skip", 1), "skip", 1, MAX_SKIP)
    return BehaviourFault(str(kind), streams, skip)


def _knob_changes(body: dict[str, object]) -> dict[str, object]:
    """The knob values a ``POST /emulator/knobs`` body sets, checked; raises Invalid."""
    validation.only_keys(body, KNOB_KEYS)
    changes: dict[str, object] = {}
    for key, choices in CHOICE_KNOBS.items():
        if key in body:
            if body[key] not in choices:
                raise Invalid(f"{key}: must be one of {', '.join(choices)}")
            changes[key] = body[key]
    for key in ("max_streams", "breach_above"):
        if key in body:
            value = body[key]
            changes[key] = None if value is None else validation.integer(value, key, 0, 2**31)
    if "legacy_delete" in body:
        if not isinstance(body["legacy_delete"], bool):
            raise Invalid("legacy_delete: expected true or false")
        changes["legacy_delete"] = body["legacy_delete"]
    for key in SECONDS_KNOBS:
        if key in body:
            changes[key] = validation.number(body[key], key, 0, 3_600_000)
    return changes


def register(
    router: Router,
    parts: AdminParts,
    before_crash: Callable[[], None],
    request_counts: Callable[[], dict[str, int]] = dict,
) -> None:
    knobs, streams, captions, faults = parts.knobs, parts.streams, parts.captions, parts.faults

    @router.route("GET", "/emulator/state")
    def state_view(state: ServiceState, _request: Request) -> Response:
        listed = []
        for stream in streams.listing():
            ingest = stream.decoder.snapshot()
            listed.append(
                {
                    **stream.info(),
                    "status": "draining" if stream.draining else "active",
                    "added_at": stream.added_unix,
                    "sensor_name": stream.sensor_name,
                    "camera_id": stream.camera_id,
                    "frame_count": ingest.frame_count,
                    "decoder_running": ingest.running,
                    "decoder_restarts": ingest.restarts,
                    "last_description": ingest.last_description,
                }
            )
        requests = [
            {"request_id": s.request_id, "stream_ids": s.params.stream_ids}
            for s in captions.active()
        ]
        return Response.json(
            200,
            {
                "phase": state.phase.value,
                "knobs": asdict(knobs.values),
                "streams": listed,
                "caption_requests": requests,
                "faults": faults.rules(),
                "requests": request_counts(),
                "bus_config": parts.bus.get(),
                "recording": parts.recorder.enabled,
            },
        )

    @router.route("POST", "/emulator/knobs")
    def set_knobs(_state: ServiceState, request: Request) -> Response:
        try:
            changes = _knob_changes(validation.json_object(request))
        except Invalid as exc:
            return validation.invalid_response(exc)
        return Response.json(200, asdict(knobs.update(**changes)))

    @router.route("POST", "/emulator/faults")
    def add_fault(_state: ServiceState, request: Request) -> Response:
        try:
            body = validation.json_object(request)
            if "kind" in body:
                faults.add_behaviour(parse_behaviour(body))
                return Response.json(200, {"faults": faults.rules()})
            validation.only_keys(body, ("path_prefix", "status", "count", "delay_s"))
            prefix = validation.string(body.get("path_prefix", "/v1/"), "path_prefix")
            count = validation.integer(body.get("count", 1), "count", 1, 1_000_000)
            status = body.get("status")
            if status is not None:
                status = validation.integer(status, "status", 500, 599)
            delay = validation.number(body.get("delay_s", 0), "delay_s", 0, MAX_DELAY_S)
            if status is None and delay == 0:
                raise Invalid("body: give status and/or delay_s")
        except Invalid as exc:
            return validation.invalid_response(exc)
        faults.add(FaultRule(prefix, count, status, delay))
        return Response.json(200, {"faults": faults.rules()})

    @router.route("DELETE", "/emulator/faults")
    def clear_faults(_state: ServiceState, _request: Request) -> Response:
        faults.clear()
        return Response.json(200, {"faults": []})

    @router.route("GET", "/emulator/exchanges")
    def exchanges(_state: ServiceState, _request: Request) -> Response:
        return Response.json(
            200, {"recording": parts.recorder.enabled, "exchanges": parts.recorder.exchanges()}
        )

    @router.route("DELETE", "/emulator/exchanges")
    def forget_exchanges(_state: ServiceState, _request: Request) -> Response:
        parts.recorder.clear()
        return Response.json(200, {"recording": parts.recorder.enabled, "exchanges": []})

    @router.route("POST", "/emulator/crash")
    def crash(_state: ServiceState, request: Request) -> Response:
        code = DEFAULT_CRASH_CODE
        if request.body.strip():
            try:
                body = validation.json_object(request)
                validation.only_keys(body, ("exit_code",))
                code = validation.integer(body.get("exit_code", code), "exit_code", 1, 255)
            except Invalid as exc:
                return validation.invalid_response(exc)

        def die() -> None:
            before_crash()
            os._exit(code)

        threading.Timer(CRASH_AFTER_S, die).start()
        return Response.json(200, {"crashing": True, "exit_code": code})
