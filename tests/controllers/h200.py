"""What a real H200 said (``scripts/capture_gpu_telemetry.py``), for the telemetry tests."""

from __future__ import annotations

from pathlib import Path

from controllers.kinds.host.gputelemetry import GpuReading, Snapshot

DATA = Path(__file__).resolve().parent.parent / "data" / "h200-telemetry"
UUID = "GPU-d9031a23-259b-a182-af39-0018caae2354"
TOTAL_MIB = 143771


def snapshot(raw: dict[str, object], source: str | None = None) -> Snapshot:
    """A Snapshot from its JSON form (``dataclasses.asdict``)."""
    gpus = raw["gpus"]
    assert isinstance(gpus, list)
    return Snapshot(source or str(raw["source"]), float(raw["at"]),  # type: ignore[arg-type]
                    tuple(GpuReading(**g) for g in gpus))
