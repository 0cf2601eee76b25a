"""The per-source view of a StreamSet in `reconciler status`."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.output import source_rows
from state.models import ResourceStatus


def test_source_rows_age_frames_and_captions() -> None:
    st = ResourceStatus(resource="StreamSet/cams", kind="StreamSet", name="cams")
    st.facts["maxFrameAgeSeconds"] = 15
    st.facts["sources"] = {
        "red": {"registered": True, "framesFresh": True, "lastFrameAt": "2026-12-03T10:00:00Z",
                "frame": "solid RED", "lastCaption": "The frame shows solid RED.",
                "lastCaptionAt": "2026-12-03T10:00:05Z"},
        "blue": {"registered": False, "framesFresh": True,
                 "lastFrameAt": "2026-12-03T09:59:00Z", "error": "no fresh frames"},
    }
    now = datetime(2026, 12, 3, 10, 0, 10, tzinfo=UTC)
    rows = {r["source"]: r for r in source_rows(st, now)}
    assert rows["red"]["registered"] == "yes" and rows["red"]["frames"] == "fresh (10s ago)"
    assert rows["red"]["caption"] == "5s ago 'The frame shows solid RED.'"
    # Seen 70 s ago with a 15 s budget: stale, whatever the last pass concluded.
    assert rows["blue"]["frames"] == "STALE (70s ago)" and rows["blue"]["registered"] == "no"
    assert rows["blue"]["caption"] == "-" and rows["blue"]["error"] == "no fresh frames"
