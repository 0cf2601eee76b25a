"""Live load against one service: register streams, caption them together, delete them and
prove them gone — the machinery every live-stream experiment type shares.

Why one driver: a canary's repetition and a capacity search's stability window are the same
act (N fresh streams, one caption request each, started together, for a fixed time, then a
blocking delete proven against the listing); only what is judged afterwards differs. The
smoke request (one frame, one token) is here too, since any long run needs it first.

Stream IDs are written ahead (``note_streams``) before each registration, so a crash cannot
lose a stream the run may have created.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from controllers.clients.rtvi_client import RtviClient
from controllers.kinds.experiments import isolation
from controllers.kinds.experiments.captures import Capture, CaptureRun, capture
from controllers.kinds.experiments.ledger import UnitOutcome
from controllers.kinds.experiments.streams import CanarySource, delete_proven, register
from controllers.kinds.streamset.caption_events import CaptionChunk
from state.evidence import Evidence

GATE_SMOKE = "smoke"
SMOKE_WINDOW_S = 60.0
ONE_FRAME_ONE_TOKEN = {"max_tokens": 1, "num_frames_per_second_or_fixed_frames_chunk": 1,
                       "use_fps_for_chunking": False}  # a fixed single frame per chunk
SMOKE_PROMPT = "Name the colour or object you see in one word."
PERF_PROMPT = "Describe what fills the frame in one short sentence."
DELETE_PROOF_S = 30.0
FRESHNESS_S = 60.0
"""How long a window waits for every new stream's first decoded frame before it opens, unless
its type says (a canary's ``freshFrameSeconds``); a stream with no frame by then is measured
anyway, and its window judges it (``controllers.kinds.experiments.captures``)."""


def from_first_frame(fresh_s: float) -> str:
    """How a measured window's progress line says when it starts."""
    return f"from the first decoded frame of each (waiting up to {fresh_s:g}s)"


@dataclass
class Measured:
    """One window of live load: what became of every unit, and what could not be deleted."""

    units: list[UnitOutcome]
    peak: int  # the most requests captioning at once
    left: list[str]  # stream IDs still listed after the delete (each a failed cleanup)
    fresh_wait_s: float = 0.0  # how long the window waited for every stream's first frame


@dataclass
class LoadDriver:
    sources: list[CanarySource]
    urls: dict[str, str]  # source → RTSP URL
    model: str
    make_client: Callable[[], RtviClient]
    stream_id: Callable[[str, str], str]  # (part, source) → stream ID
    note_streams: Callable[[list[str]], None]  # write-ahead: the run may create these
    evidence: Evidence
    stop: threading.Event
    progress: Callable[[str], None]
    max_tokens: int
    chunk_s: int
    delete_s: float = DELETE_PROOF_S  # how long a deletion may take to be proven

    def register(self, ids: dict[str, str], labels: dict[str, str]) -> dict[str, str]:
        """Register one stream per source; source → why it was refused."""
        self.note_streams(list(ids.values()))  # before the call: a crash cannot lose them
        client = self.make_client()
        try:
            return register(client, ids, self.urls, labels)
        finally:
            client.close()

    def capture(self, ids: dict[str, str], prompt: str,
                enough: Callable[[list[CaptionChunk]], bool], window_s: float,
                extra: dict[str, Any] | None = None, fresh_s: float = 0.0) -> CaptureRun:
        """Caption every stream together for ``window_s`` (or until ``enough``), the window
        opening once every stream shows a frame when ``fresh_s`` > 0 (see captures)."""
        if not ids:
            return CaptureRun({}, 0)
        bodies: dict[str, dict[str, Any]] = {
            name: {"id": sid, "prompt": prompt, "model": self.model, "stream": True,
                   "max_tokens": self.max_tokens, "chunk_duration": self.chunk_s,
                   **(extra or {})}
            for name, sid in ids.items()}
        return capture(self.make_client, bodies, enough, window_s, float(self.chunk_s),
                       self.stop, fresh_s)

    def delete(self, ids: list[str]) -> list[str]:
        """Delete in one blocking batch and prove it; the IDs still listed."""
        client = self.make_client()
        try:
            return delete_proven(client, ids, self.delete_s, self.stop)
        finally:
            client.close()

    def keep_samples(self, relative: str, run: dict[str, Capture]) -> None:
        lines = [json.dumps({"source": n, **asdict(c)}, sort_keys=True)
                 for n, cap in sorted(run.items()) for c in cap.chunks]
        self.evidence.write_text(relative, "\n".join(lines) + ("\n" if lines else ""))

    def window(self, part: str, names: list[str], seconds: float, repetition: int,
               samples: str, prompt: str = PERF_PROMPT,
               fresh_s: float = FRESHNESS_S) -> Measured:
        """Fresh streams for ``names`` captioned together for ``seconds`` once each shows a
        decoded frame (waiting up to ``fresh_s``), then deleted and proven gone; every
        measured chunk kept in ``samples`` (a path in the evidence)."""
        labels = {s.name: s.label for s in self.sources if s.name in names}
        ids = {n: self.stream_id(part, n) for n in names}
        refused = self.register(ids, labels)
        captured = self.capture({n: ids[n] for n in ids if n not in refused}, prompt,
                                lambda _chunks: False, seconds, fresh_s=fresh_s)
        run, peak = captured.captures, captured.active_peak
        left = self.delete(list(ids.values()))
        self.keep_samples(samples, run)
        units = []
        for name in names:
            cap = run.get(name)
            units.append(UnitOutcome(
                source=name, repetition=repetition,
                admitted=cap is not None and cap.admitted,
                rejected=refused.get(name, "") or (cap.rejected if cap else ""),
                timed_out=cap is not None and cap.timed_out,
                broken=cap.broken if cap is not None and cap.admitted else "",
                chunks=cap.chunks if cap else [], cleaned_up=ids[name] not in left))
        return Measured(units, peak, left, captured.fresh_wait_s)

    def smoke(self) -> bool:
        """One stream, one request for 1 token: its first chunk must bring frames and an
        answer, no error, within a minute; then the stream is deleted and proven gone. A hang,
        a timeout or a stream that stays means the long run would measure a broken service.
        Writes the smoke gate; True when it passed."""
        first = self.sources[0]
        self.progress(f"smoke: 1 frame, 1 token on {first.name}")
        ids = {first.name: self.stream_id("smoke", first.name)}
        refused = self.register(ids, {first.name: first.label})
        run = self.capture({n: i for n, i in ids.items() if n not in refused}, SMOKE_PROMPT,
                           lambda chunks: any(isolation.is_answer(c) for c in chunks),
                           SMOKE_WINDOW_S, ONE_FRAME_ONE_TOKEN).captures
        left = self.delete(list(ids.values()))
        cap = run.get(first.name)
        answers = [c for c in (cap.chunks if cap else []) if isolation.is_answer(c)]
        problems = [refused[first.name]] if first.name in refused else []
        problems += [refusal(cap)] if refusal(cap) else []
        if not answers:
            problems.append(f"no answer within {SMOKE_WINDOW_S:g}s")
        elif answers[0].error or not answers[0].content.strip():
            problems.append(answers[0].error or "empty answer")
        problems += [f"stream {sid} not deleted" for sid in left]
        reason = "; ".join(problems) or f"answered {answers[0].content!r}; stream deleted"
        self.evidence.gate(GATE_SMOKE, not problems, reason, {
            "source": first.name, "streamId": ids[first.name], "maxTokens": 1,
            "chunks": [asdict(c) for c in (cap.chunks if cap else [])], "left": left})
        return not problems


def refusal(cap: Capture | None) -> str:
    """Why a capture did not serve: refused at the door, or broken after admission."""
    if cap is None:
        return ""
    return cap.rejected or cap.broken
