"""What a StreamSet's record says about it and each of its sources (``ResourceStatus.facts``;
see ``controllers.facts``), and the sources table ``status NAME`` shows."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import Field

from controllers.facts import Facts, LiveSignal, age_text, within


class SourceFacts(Facts):
    """One source of a StreamSet: where its frames come from, how it is registered, how it is."""

    origin: str | None = None
    camera: str | None = None
    sensor_id: str | None = None
    vst_url: str | None = None
    hash: str | None = None
    rtvi_url: str | None = None
    stream_id: str | None = None
    spec: dict[str, Any] | None = None
    registered: bool | None = None
    last_frame_at: str | None = None
    frame: str | None = None
    frames_fresh: bool | None = None
    error: str | None = None
    last_caption: str | None = None
    last_caption_at: str | None = None
    caption_chunks: int | None = None
    empty_chunks: int | None = None
    caption_latency_ms: float | None = None
    caption_error: str | None = None


class StreamSetStatusFacts(Facts):
    """A StreamSet: the Deployment and services it uses, and each source's facts by name."""

    TABLE = "sources"
    TABLE_COLUMNS = (("source", "SOURCE"), ("registered", "REGISTERED"), ("frames", "FRAMES"),
                     ("frame", "SEEN"), ("caption", "LAST CAPTION"), ("error", "ERROR"))

    deployment: str | None = None
    rtvi: str | None = None
    vst: str | None = None
    host: str | None = None
    max_frame_age_seconds: float | None = None
    sources: dict[str, SourceFacts] = Field(default_factory=dict)

    def live(self) -> list[LiveSignal]:
        """Each source's last caption latency, and when its last caption came: what a bake of
        the Deployment that captions them watches."""
        return [LiveSignal(f"source {name}", fact.caption_latency_ms, fact.last_caption_at)
                for name, fact in sorted(self.sources.items())]

    @classmethod
    def parse(cls, raw: object) -> Self:
        """As :meth:`Facts.parse`, but one bad source drops only that source's bad keys."""
        data = dict(raw) if isinstance(raw, dict) else {}
        sources = data.pop("sources", None)
        parsed = super().parse(data)
        if isinstance(sources, dict):
            parsed.sources = {str(name): SourceFacts.parse(fact)
                              for name, fact in sources.items()}
        return parsed

    def table(self, now: datetime | None = None) -> list[dict[str, str]]:
        """Per source: registered, frames fresh (a frame older than maxFrameAgeSeconds is
        stale, whatever the last pass concluded), what was seen, the last caption's age."""
        rows = []
        for name, fact in sorted(self.sources.items()):
            caption = fact.last_caption or ""
            fresh = fact.frames_fresh and within(fact.last_frame_at,
                                                  self.max_frame_age_seconds, now)
            rows.append({
                "source": name,
                "registered": "yes" if fact.registered else "no",
                "frames": ("fresh" if fresh else "STALE") + age_text(fact.last_frame_at, now),
                "frame": fact.frame or "",
                "caption": (age_text(fact.last_caption_at, now).strip(" ()") or "-")
                + (f" {caption[:60]!r}" if caption else ""),
                "error": fact.error or fact.caption_error or "",
            })
        return rows
