"""What every experiment type's section of ``report.md`` is made of.

Each type writes its own section (``ExperimentType.report``) from the evidence files it wrote:
the report (``report.py``) adds the header, the gates and the GPU telemetry, and draws what a
section hands it. A leaf module, so type modules can use it without importing the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from controllers.experiments import plots
from state.evidence import Evidence


@dataclass
class Section:
    """Markdown lines, and the section's figure (PNG): a type's is its latency plot."""

    lines: list[str] = field(default_factory=list)
    plot: bytes | None = None


def load_json(evidence: Evidence, relative: str) -> dict[str, Any]:
    """A JSON object of the bundle; empty when missing or unreadable (a gap, not a failure)."""
    try:
        data = json.loads(evidence.path(relative).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def latency_point(streams: int, latency: Any, verdict: str = "") -> plots.LatencyPoint:
    lat = latency if isinstance(latency, dict) else {}
    return plots.LatencyPoint(streams, lat.get("p50"), lat.get("p95"), lat.get("p99"), verdict)


def cell(text: object) -> str:
    """One Markdown table cell or line: no line breaks, no column separators."""
    return " ".join(str(text).split()).replace("|", "\\|")
