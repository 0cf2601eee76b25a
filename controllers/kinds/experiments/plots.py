"""PNG plots of a run's evidence: latency against live streams, GPU memory over the run, and
a candidate's latency beside its baseline's (a promotion).

Why figures built directly (``Figure`` + the Agg canvas) rather than ``pyplot``: pyplot keeps
global state and is not thread-safe, and runs finish on worker threads beside the daemon's
queue. Every plot is drawn from numbers already in the evidence, so a reader can check the
picture against the JSON; what was not measured is said on the figure, never drawn as zero.

matplotlib (with numpy) is imported on the first plot, not with this module: the daemon imports
every experiment type at start, and most daemons never draw a figure. Imported eagerly it cost
the daemon about 45 MiB of RSS and 0.4 s of start-up.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SIZE_IN = (7.0, 4.2)
DPI = 100
COLOURS = {"p50": "#4c72b0", "p95": "#dd8452", "p99": "#c44e52"}


@dataclass(frozen=True)
class LatencyPoint:
    """One window (or repetition set) at ``streams`` live streams."""

    streams: int
    p50: float | None
    p95: float | None
    p99: float | None
    verdict: str = ""  # "stable" | "unstable" | "inconclusive" | "" (not judged by count)


def latency_by_streams(points: list[LatencyPoint], title: str, max_p95_ms: float | None = None,
                       boundary: tuple[int | None, int | None] = (None, None),
                       xlabel: str = "live streams") -> bytes:
    """p50/p95/p99 chunk latency against live streams; the maximum p95 and the boundary
    (highest stable, first unstable) marked when known."""
    fig = _figure()
    ax = fig.add_subplot()
    ordered = sorted(points, key=lambda p: p.streams)
    for name in ("p50", "p95", "p99"):
        xy = [(p.streams, getattr(p, name)) for p in ordered if getattr(p, name) is not None]
        if xy:
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=name,
                    color=COLOURS[name])
    unstable = [(p.streams, p.p95) for p in ordered
                if p.verdict == "unstable" and p.p95 is not None]
    if unstable:
        ax.scatter([n for n, _ in unstable], [v for _, v in unstable], s=120,
                   facecolors="none", edgecolors="black", label="unstable window", zorder=3)
    if max_p95_ms is not None:
        ax.axhline(max_p95_ms, color="grey", linestyle="--", label=f"max p95 {max_p95_ms:g} ms")
    stable, first_unstable = boundary
    if stable is not None:
        ax.axvline(stable, color="green", linestyle=":", label=f"highest stable {stable}")
    if first_unstable is not None:
        ax.axvline(first_unstable, color="red", linestyle=":",
                   label=f"first unstable {first_unstable}")
    if not any(p.p95 is not None for p in ordered):
        ax.text(0.5, 0.5, "no chunk latency was measured", transform=ax.transAxes,
                ha="center", va="center")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("chunk latency (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return _png(fig)


def gpu_memory(series: dict[str, list[tuple[float, int]]], title: str,
               not_measured: str = "") -> bytes:
    """Memory in use per GPU (MiB) against seconds since the first reading; ``not_measured``
    (why there is no series) is written on the figure instead."""
    fig = _figure()
    ax = fig.add_subplot()
    start = min((t for points in series.values() for t, _ in points), default=0.0)
    for uuid, points in sorted(series.items()):
        ax.plot([t - start for t, _ in points], [m for _, m in points], label=uuid[:16])
    if not any(series.values()):
        ax.text(0.5, 0.5, textwrap.fill(f"GPU memory {not_measured or 'not measured'}", 60),
                transform=ax.transAxes, ha="center", va="center")
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_xlabel("seconds into the measurement")
    ax.set_ylabel("GPU memory used (MiB)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return _png(fig)


def latency_side_by_side(sides: dict[str, list[float]], title: str,
                         p95s: dict[str, float | None]) -> bytes:
    """The share of chunks answered within each latency, one curve per side (an empirical
    CDF: a slower side's curve lies to the right), each side's p95 marked. Drawn from every
    chunk of both runs, so a difference in the bulk and one in the tail both show."""
    fig = _figure()
    ax = fig.add_subplot()
    for (name, values), colour in zip(sorted(sides.items()), ("#4c72b0", "#dd8452"),
                                      strict=False):
        ordered = sorted(values)
        if ordered:
            ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))],
                    where="post", color=colour, label=f"{name} ({len(ordered)} chunks)")
        p95 = p95s.get(name)
        if p95 is not None:
            ax.axvline(p95, color=colour, linestyle="--", label=f"{name} p95 {p95:.0f} ms")
    if not any(sides.values()):
        ax.text(0.5, 0.5, "no chunk latency was measured", transform=ax.transAxes,
                ha="center", va="center")
    ax.set_xlabel("chunk latency (ms)")
    ax.set_ylabel("share of chunks answered within")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="lower right")
    return _png(fig)


def _figure() -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE_IN, dpi=DPI)
    FigureCanvasAgg(fig)  # attaches itself to the figure
    return fig


def _png(fig: Figure) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()
