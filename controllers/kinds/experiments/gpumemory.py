"""GPU memory of a run's GPUs: the baseline before its service starts, and the proof after
cleanup that it came back (``rules.md``: GPU memory back near the idle baseline, where GPU
telemetry exists).

Telemetry is the Host's (``HostSession.telemetry``: NVML, nvidia-smi or a DCGM exporter): memory
in use per GPU UUID, the driver's reservation left out. A run without GPUs, or telemetry that
cannot be read, is recorded as not measured, in words that say why — never as passed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from controllers.errors import ControllerError
from controllers.kinds.host.gputelemetry import Telemetry
from controllers.waiting import Stopped, until

TOLERANCE_MIB = 512  # "near" the baseline: allocator slack, a driver context
POLL_S = 1.0
NO_GPU = "not measured (the run uses no GPU)"
Reader = Callable[[], dict[str, int]]


@dataclass(frozen=True)
class GpuMemory:
    """What was measured (MiB per GPU UUID), or why nothing was."""

    mib: dict[str, int] | None
    why_not: str = ""

    def as_evidence(self) -> dict[str, int] | str:
        return self.mib if self.mib is not None else self.why_not


def reader(source: Telemetry | None) -> Reader | None:
    """Memory in use (MiB) per GPU UUID, as ``source`` reads it."""
    if source is None:
        return None
    return lambda: {g.uuid: g.memory_used_mib for g in source.read().gpus}


def measure(read: Reader | None, uuids: list[str]) -> GpuMemory:
    if not uuids:
        return GpuMemory(None, NO_GPU)
    if read is None:
        return GpuMemory(None, "not measured (no GPU telemetry for this Host)")
    try:
        used = read()
    except ControllerError as exc:
        return GpuMemory(None, f"not measured ({exc})")
    unseen = [u for u in uuids if u not in used]
    if unseen:  # a GPU the telemetry does not see is not measured, not idle
        return GpuMemory(None, f"not measured (the telemetry does not report GPU "
                               f"{', '.join(unseen)})")
    return GpuMemory({u: used[u] for u in uuids})


def back_to_baseline(read: Reader | None, uuids: list[str], baseline: GpuMemory,
                     timeout_s: float, stop: threading.Event) -> tuple[GpuMemory, list[str]]:
    """Wait (within ``timeout_s``) until every GPU holds at most its baseline plus the
    tolerance; returns the last measurement and a problem per GPU that did not come back."""
    if baseline.mib is None:
        return baseline, []
    last = [measure(read, uuids)]

    def settled() -> bool | None:
        last[0] = measure(read, uuids)
        return True if _over(last[0], baseline) == [] else None
    try:
        until(settled, timeout_s=max(0.0, timeout_s), pace=POLL_S, stop=stop)
    except Stopped:
        raise
    if last[0].mib is None:
        return last[0], [f"GPU memory after cleanup {last[0].why_not}"]
    return last[0], _over(last[0], baseline)


def _over(now: GpuMemory, baseline: GpuMemory) -> list[str]:
    assert baseline.mib is not None
    if now.mib is None:
        return [now.why_not]
    return [f"GPU {uuid}: {now.mib[uuid]} MiB in use, {now.mib[uuid] - base} MiB above its "
            f"baseline of {base} MiB ({TOLERANCE_MIB} allowed)"
            for uuid, base in baseline.mib.items() if now.mib.get(uuid, 0) > base + TOLERANCE_MIB]
