"""What `reconciler status` shows: the reason column, and the per-source view of a StreamSet."""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.output import detail_rows, status_rows
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
    rows = {r["source"]: r for r in detail_rows(st, now)}
    assert rows["red"]["registered"] == "yes"
    assert rows["red"]["frames"] == "fresh (10s ago)"
    assert rows["red"]["caption"] == "5s ago 'The frame shows solid RED.'"
    # Seen 70 s ago with a 15 s budget: stale, whatever the last pass concluded.
    assert rows["blue"]["frames"] == "STALE (70s ago)"
    assert rows["blue"]["registered"] == "no"
    assert rows["blue"]["caption"] == "-"
    assert rows["blue"]["error"] == "no fresh frames"


def _reasons(st: ResourceStatus) -> tuple[str, str, str]:
    row = status_rows([st])[0]
    return row["ready"], row["reason"], row["message"]


def test_a_change_in_flight_is_shown_instead_of_the_last_verdict_it_made_untrue() -> None:
    st = ResourceStatus(resource="StreamSet/cams", kind="StreamSet", name="cams")
    st.set_condition("Ready", "Unknown", "WaitingForDeployment", "waiting for Deployment/vlm")
    assert _reasons(st) == ("Unknown", "WaitingForDeployment", "waiting for Deployment/vlm")
    st.set_condition("Progressing", "True", "ProvingFrames", "proving frames: 3 of 49")
    assert _reasons(st) == ("Unknown", "ProvingFrames", "proving frames: 3 of 49")
    # A failed pass ends Progressing: its verdict is shown again.
    st.set_condition("Progressing", "False", "SourcesDegraded", "")
    st.set_condition("Ready", "False", "SourcesDegraded", "red: no frame")
    assert _reasons(st) == ("False", "SourcesDegraded", "red: no frame")
    # A Ready resource keeps showing Ready while a change is applied (SYNC says "no").
    st.set_condition("Ready", "True", "FramesFlowing", "49 source(s)")
    st.set_condition("Progressing", "True", "Applying", "applying 1 change(s): register 1")
    assert _reasons(st) == ("True", "FramesFlowing", "49 source(s)")


def test_a_run_executing_as_a_job_says_where_and_how_recently_it_was_seen() -> None:
    st = ResourceStatus(resource="Experiment/canary", kind="Experiment", name="canary")
    st.facts.update({"phase": "Running", "host": "edge", "runner": "rtvi-run-c1",
                     "reportedAt": "2026-12-03T10:00:04Z", "followedAt": "2026-12-03T10:00:09Z"})
    now = datetime(2026, 12, 3, 10, 0, 10, tzinfo=UTC)
    assert status_rows([st], now)[0]["where"] == "job on edge, reported 6s ago"
    # No reconciler has looked for 20 minutes: it runs on regardless, and status says so.
    later = datetime(2026, 12, 3, 10, 20, 9, tzinfo=UTC)
    assert status_rows([st], later)[0]["where"] == ("job on edge, reported 20m ago, not "
                                                    "followed for 20m")
    st.facts["result"] = "PASS"  # done: nothing left to follow, its last report its end
    assert status_rows([st], later)[0]["where"] == "job on edge"
    in_process = ResourceStatus(resource="Experiment/old", kind="Experiment", name="old")
    in_process.facts.update({"phase": "Running", "host": "local"})
    assert status_rows([in_process], now)[0]["where"] == ""
    deployment = ResourceStatus(resource="Deployment/vlm", kind="Deployment", name="vlm")
    assert status_rows([deployment], now)[0]["where"] == ""
