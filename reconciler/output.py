"""Human output: plan listings and the status table (rich), all through the redactor.

Every value printed for a person passes ``reconciler.textsafe`` (secrets redacted, terminal
control characters shown as escapes). Values are never parsed as rich markup: they are printed
with ``markup=False`` or wrapped in :class:`~rich.text.Text`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from controllers.facts import Facts
from reconciler.textsafe import safe, safe_block
from state.models import Condition, ResourceStatus

if TYPE_CHECKING:
    from reconciler.kinds import AnyPlan

VERB_MARK = {"pull": "v", "load": "v", "create": "+", "recreate": "~", "publish": "+",
             "register": "+", "register-sensor": "+", "replace": "~", "remove": "-", "run": ">"}
ADDING = ("create", "publish", "register", "register-sensor")
PULLING = "Pulling"  # a new image coming while the old one serves: shown even when Ready

def print_plan(console: Console, plans: list[AnyPlan]) -> None:
    creates = recreates = removes = pulls = loads = in_sync = 0
    for rp in plans:
        if rp.error is not None:
            console.print(Text.assemble(("✗", "red"), f" {safe(rp.resource)}: cannot plan"),
                          highlight=False)
            for line in safe_block(rp.error).splitlines():
                console.print(f"    {line}", highlight=False, markup=False)
            continue
        if rp.plan is None:
            continue  # nothing of it to change (a Host is only observed)
        if rp.plan.conflict is not None:
            console.print(f"! {safe(rp.resource)}: Conflict: {safe(rp.plan.conflict)}",
                          highlight=False, markup=False)
            continue
        if not rp.plan.actions:
            in_sync += 1
            console.print(f"  {safe(rp.resource)}: in sync", highlight=False, markup=False)
            continue
        for action in rp.plan.actions:
            creates += action.verb in ADDING
            recreates += action.verb in ("recreate", "replace")
            removes += action.verb == "remove"
            pulls += action.verb == "pull"
            loads += action.verb == "load"
            console.print(f"{VERB_MARK.get(action.verb, '>')} {safe(rp.resource)}: {action.verb} "
                          f"{safe(action.target)}", highlight=False, markup=False)
            console.print(f"    because {safe(action.cause)}", highlight=False, markup=False)
    removing = f", {removes} to remove" if removes else ""
    pulling = (f"{pulls} image(s) to pull, " if pulls else "") + (
        f"{loads} image(s) to load, " if loads else "")
    console.print(f"Plan: {pulling}{creates} to create, {recreates} to recreate{removing}, "
                  f"{in_sync} in sync.", highlight=False)


def shown_condition(st: ResourceStatus) -> Condition | None:
    """The condition whose reason and message ``status`` shows: Ready's, except while a
    resource that is not Ready is being changed (Progressing True), or an image is being
    pulled for it (what a Ready service will be replaced by, once it is on the Host). Then
    Ready still holds the last pass's verdict, which the change in flight may make untrue."""
    ready = st.condition("Ready")
    progressing = st.condition("Progressing")
    if progressing is not None and progressing.status == "True" and (
            ready is None or ready.status != "True" or progressing.reason == PULLING):
        return Condition(type="Ready", status=ready.status if ready else "Unknown",
                         reason=progressing.reason, message=progressing.message,
                         last_transition_time=progressing.last_transition_time)
    return ready


def status_rows(records: list[ResourceStatus], now: datetime | None = None
                ) -> list[dict[str, Any]]:
    rows = []
    for st in records:
        ready = shown_condition(st)
        facts = Facts.for_kind(st.kind)
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
            # Run-once kinds (Experiment) say where a run is and, once terminal, its verdict;
            # a Deployment, a candidate it qualifies or holds out.
            "phase": facts.of(st).shown_phase() if facts is not None else "",
            "result": str(st.facts.get("result") or ""),
            # Where it executes when not in the reconciler (a job on its Host), and how
            # recently it reported and was followed.
            "where": facts.of(st).where(now) if facts is not None else "",
        })
    return rows


def print_status_table(console: Console, records: list[ResourceStatus]) -> None:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    rows = status_rows(records)
    runs = any(row["phase"] for row in rows)  # phase and result columns only where runs are
    for col in ("RESOURCE", "HOST", "READY", "SYNC", *(("PHASE", "RESULT") if runs else ()),
                "REASON", "SINCE", "MESSAGE"):
        table.add_column(col, overflow="fold")
    for row in rows:
        phase = f"{row['phase']} ({row['where']})" if row["where"] else row["phase"]
        cells = (row["resource"], row["host"], row["ready"], "yes" if row["inSync"] else "no",
                 *((phase, row["result"]) if runs else ()), row["reason"], row["since"],
                 row["message"])
        table.add_row(*(Text(safe(cell)) for cell in cells))  # Text: never parsed as markup
    console.print(table)


def detail_rows(st: ResourceStatus, now: datetime | None = None) -> list[dict[str, str]]:
    """The table a kind's facts declare for ``status NAME`` (a StreamSet's sources)."""
    facts = Facts.for_kind(st.kind)
    return facts.of(st).table(now) if facts is not None else []


def _print_table(console: Console, st: ResourceStatus) -> None:
    facts = Facts.for_kind(st.kind)
    rows = detail_rows(st)
    if facts is None or not rows:
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for _, header in facts.TABLE_COLUMNS:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(Text(safe(row[k])) for k, _ in facts.TABLE_COLUMNS))
    console.print(f"  {facts.TABLE}:", highlight=False)
    console.print(table)


def _print_facts(console: Console, st: ResourceStatus) -> None:
    """One line per fact; a run's gates one line each; the kind's table fact below them."""
    facts = Facts.for_kind(st.kind)
    for key, value in sorted(st.facts.items()):
        if facts is not None and key == facts.TABLE and isinstance(value, dict):
            continue  # shown as a table below
        if key == "gates" and isinstance(value, dict):  # a run's gates: one line each
            console.print("  gates:", highlight=False)
            for gate, verdict in sorted(value.items()):
                console.print(f"    {safe(gate)}: {safe(verdict)}", highlight=False,
                              markup=False)
            continue
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        console.print(f"  {safe(key)}: {safe(shown)}", highlight=False, markup=False)


def print_status_detail(console: Console, st: ResourceStatus) -> None:
    console.print(Text.assemble((safe(st.resource), "bold"),
                                f"  (from {safe(st.source_file or '?')})"), highlight=False)
    console.print(f"  generation: observed {safe(st.observed_generation or '-')}  desired "
                  f"{safe(st.desired_generation or '-')}", highlight=False, markup=False)
    for cond in st.conditions:
        console.print(f"  {cond.type:<12} {cond.status:<8} {safe(cond.reason):<22} "
                      f"{safe(cond.last_transition_time)}  {safe(cond.message)}",
                      highlight=False, markup=False)
    _print_facts(console, st)
    _print_table(console, st)
    if st.inventory:
        console.print("  inventory:", highlight=False)
        for item in st.inventory:
            console.print(f"    {safe(item.kind)} {safe(item.name)} {safe(item.id or '(pending)')}"
                          f" on {safe(item.host)}", highlight=False, markup=False)
    if st.history:
        console.print("  history (newest last):", highlight=False)
        for entry in st.history[-10:]:
            console.print(f"    {safe(entry.time)} {safe(entry.action)} {safe(entry.target)} "
                          f"[{entry.result}] because {safe(entry.cause)}", highlight=False,
                          markup=False)
