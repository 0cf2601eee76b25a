"""Human output: plan listings and the status table (rich), all through the redactor."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from state.models import ResourceStatus
from state.redaction import DEFAULT_REDACTOR

if TYPE_CHECKING:
    from reconciler.engine import ResourcePlan

VERB_MARK = {"create": "+", "recreate": "~", "publish": "+", "register": "+",
             "register-sensor": "+", "replace": "~", "remove": "-"}
ADDING = ("create", "publish", "register", "register-sensor")


def safe(text: str) -> str:
    return DEFAULT_REDACTOR.scrub_text(text)


def print_plan(console: Console, plans: list[ResourcePlan]) -> None:
    creates = recreates = removes = in_sync = 0
    for rp in plans:
        if rp.error is not None:
            console.print(f"[red]✗[/red] {rp.resource}: cannot plan", highlight=False)
            for line in safe(rp.error).splitlines():
                console.print(f"    {line}", highlight=False, markup=False)
            continue
        assert rp.plan is not None
        if rp.plan.conflict is not None:
            console.print(f"! {rp.resource}: Conflict: {safe(rp.plan.conflict)}",
                          highlight=False, markup=False)
            continue
        if not rp.plan.actions:
            in_sync += 1
            console.print(f"  {rp.resource}: in sync", highlight=False)
            continue
        for action in rp.plan.actions:
            creates += action.verb in ADDING
            recreates += action.verb in ("recreate", "replace")
            removes += action.verb == "remove"
            console.print(f"{VERB_MARK[action.verb]} {rp.resource}: {action.verb} "
                          f"{action.target}", highlight=False, markup=False)
            console.print(f"    because {safe(action.cause)}", highlight=False, markup=False)
    removing = f", {removes} to remove" if removes else ""
    console.print(f"Plan: {creates} to create, {recreates} to recreate{removing}, {in_sync} in "
                  "sync.", highlight=False)


def status_rows(records: list[ResourceStatus]) -> list[dict[str, Any]]:
    rows = []
    for st in records:
        ready = st.condition("Ready")
        rows.append({
            "resource": st.resource,
            "host": st.facts.get("host", ""),
            "ready": ready.status if ready else "Unknown",
            "reason": ready.reason if ready else "",
            "message": ready.message if ready else "",
            "inSync": st.observed_generation is not None
            and st.observed_generation == st.desired_generation,
            "observedGeneration": (st.observed_generation or "")[:12],
            "since": ready.last_transition_time if ready else "",
        })
    return rows


def print_status_table(console: Console, records: list[ResourceStatus]) -> None:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("RESOURCE", "HOST", "READY", "SYNC", "REASON", "SINCE", "MESSAGE"):
        table.add_column(col, overflow="fold")
    for row in status_rows(records):
        table.add_row(row["resource"], row["host"], row["ready"],
                      "yes" if row["inSync"] else "no", row["reason"], row["since"],
                      safe(row["message"]))
    console.print(table)


def source_rows(st: ResourceStatus, now: datetime | None = None) -> list[dict[str, str]]:
    """Per-source state of a StreamSet: registered, frames fresh, last caption and its age."""
    raw = st.facts.get("sources")
    max_age = st.facts.get("maxFrameAgeSeconds")
    rows = []
    for name, fact in sorted(raw.items()) if isinstance(raw, dict) else []:
        if not isinstance(fact, dict):
            continue
        caption = str(fact.get("lastCaption") or "")
        rows.append({
            "source": name,
            "registered": "yes" if fact.get("registered") else "no",
            "frames": ("fresh" if fact.get("framesFresh") and _within(
                fact.get("lastFrameAt"), max_age, now) else "STALE") + _age(
                fact.get("lastFrameAt"), now),
            "frame": str(fact.get("frame") or ""),
            "caption": (_age(fact.get("lastCaptionAt"), now).strip(" ()") or "-")
            + (f" {caption[:60]!r}" if caption else ""),
            "error": str(fact.get("error") or fact.get("captionError") or ""),
        })
    return rows


def _seconds_since(stamp: object, now: datetime | None) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ((now or datetime.now(UTC)) - then).total_seconds()


def _age(stamp: object, now: datetime | None) -> str:
    seconds = _seconds_since(stamp, now)
    return "" if seconds is None else f" ({seconds:.0f}s ago)"


def _within(stamp: object, max_age: object, now: datetime | None) -> bool:
    """A frame seen longer ago than the StreamSet's maxFrameAgeSeconds is not fresh any more,
    whatever the last pass concluded."""
    seconds = _seconds_since(stamp, now)
    if seconds is None or not isinstance(max_age, int | float):
        return seconds is not None
    return seconds <= max_age


def print_sources(console: Console, st: ResourceStatus) -> None:
    rows = source_rows(st)
    if not rows:
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("SOURCE", "REGISTERED", "FRAMES", "SEEN", "LAST CAPTION", "ERROR"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(Text(safe(row[k])) for k in ("source", "registered", "frames", "frame",
                                                      "caption", "error")))
    console.print("  sources:", highlight=False)
    console.print(table)


def print_status_detail(console: Console, st: ResourceStatus) -> None:
    console.print(f"[bold]{st.resource}[/bold]  (from {st.source_file or '?'})", highlight=False)
    console.print(f"  generation: observed {st.observed_generation or '-'}  desired "
                  f"{st.desired_generation or '-'}", highlight=False)
    for cond in st.conditions:
        console.print(f"  {cond.type:<12} {cond.status:<8} {cond.reason:<22} "
                      f"{cond.last_transition_time}  {safe(cond.message)}",
                      highlight=False, markup=False)
    for key, value in sorted(st.facts.items()):
        if key == "sources" and st.kind == "StreamSet" and isinstance(value, dict):
            continue  # shown as a table below
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        console.print(f"  {key}: {safe(shown)}", highlight=False, markup=False)
    if st.kind == "StreamSet":
        print_sources(console, st)
    if st.inventory:
        console.print("  inventory:", highlight=False)
        for item in st.inventory:
            console.print(f"    {item.kind} {item.name} {item.id or '(pending)'} on {item.host}",
                          highlight=False, markup=False)
    if st.history:
        console.print("  history (newest last):", highlight=False)
        for entry in st.history[-10:]:
            console.print(f"    {entry.time} {entry.action} {entry.target} [{entry.result}] "
                          f"because {safe(entry.cause)}", highlight=False, markup=False)
