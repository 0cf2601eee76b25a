"""What every experiment type's section of ``report.md`` is made of.

Each type writes its own section (``ExperimentType.report``) from the evidence files it wrote:
the report (``report.py``) adds the header, the gates and the GPU telemetry, and draws what a
section hands it. A leaf module, so type modules can use it without importing the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controllers.kinds.experiments import plots
from controllers.kinds.experiments.ledger import LatencySummary


@dataclass
class Section:
    """Markdown lines, and the section's figure (PNG): a type's is its latency plot."""

    lines: list[str] = field(default_factory=list)
    plot: bytes | None = None


def latency_point(streams: int, latency: LatencySummary | None,
                  verdict: str = "") -> plots.LatencyPoint:
    if latency is None:
        return plots.LatencyPoint(streams, None, None, None, verdict)
    return plots.LatencyPoint(streams, latency.p50, latency.p95, latency.p99, verdict)


def cell(text: object) -> str:
    """One Markdown table cell or line: no line breaks, no column separators."""
    return " ".join(str(text).split()).replace("|", "\\|")
