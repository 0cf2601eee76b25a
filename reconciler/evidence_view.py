"""What ``reconciler evidence RUN`` shows: a run's status, its gates, and whether it is intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from reconciler.textsafe import safe
from state.evidence import PLOTS_DIR, REPORT, Evidence


def summary(evidence: Evidence) -> dict[str, Any]:
    """Status and gates of one run, as plain data (``-o json`` prints exactly this)."""
    status = evidence.status_document()
    return {"run": evidence.folder.name, "folder": str(evidence.folder),
            "phase": status.phase if status else None,
            "state": status.state if status else None,
            "result": status.result if status else None,
            "reason": status.reason if status else None,
            "gates": [{"gate": g.name, "passed": g.passed, "reason": g.reason}
                      for g in evidence.gates().values()],
            "report": REPORT if (evidence.folder / REPORT).is_file() else None,
            "plots": sorted(str(p.relative_to(evidence.folder))
                            for p in (evidence.folder / PLOTS_DIR).glob("*.png"))}


def print_summary(console: Console, data: dict[str, Any]) -> None:
    console.print(Text.assemble(("run ", ""), (safe(data["run"]), "bold"),
                                f"  ({safe(data['folder'])})"), highlight=False)
    for key in ("phase", "state", "result", "reason"):
        console.print(f"  {key}: {safe(str(data[key] or '-'))}", markup=False, highlight=False)
    if data["gates"]:
        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col in ("GATE", "VERDICT", "REASON"):
            table.add_column(col, overflow="fold")
        for gate in data["gates"]:
            table.add_row(Text(safe(gate["gate"])), "PASS" if gate["passed"] else "FAIL",
                          Text(safe(gate["reason"])))
        console.print(table)
    for key in ("report", "plots"):
        found = data.get(key)
        files = found if isinstance(found, list) else [found] if found else []
        if files:
            shown = ", ".join(safe(f) for f in files)
            console.print(f"  {key}: {shown}", markup=False, highlight=False)


def default_root(state_dir: Path) -> Path:
    """Where runs keep their evidence unless their spec names an ``evidenceRoot``."""
    return state_dir / "evidence"
