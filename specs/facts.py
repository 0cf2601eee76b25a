"""Observed facts about a Host, as plain data.

Controllers gather them (Docker version, ``nvidia-smi``); rules in ``specs.hostrules`` judge
specs against them. Keeping the data type here keeps those rules pure and testable with facts
recorded from real machines.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


class GpuInfo(BaseModel):
    """One GPU as ``nvidia-smi`` reports it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    uuid: str
    name: str
    compute_capability: str
    memory_total_mib: int
    memory_used_mib: int | None = None

    @property
    def capability(self) -> tuple[int, int]:
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)


class HostFacts(BaseModel):
    """What a Host is, observed: engine identity and GPUs (empty list = no GPUs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    engine_version: str
    api_version: str
    os: str = ""
    gpus: list[GpuInfo] = []
    gpu_probe: str = "none"

    def gpu(self, ref: int | str) -> GpuInfo | None:
        """Find a GPU by index or by UUID."""
        for gpu in self.gpus:
            if (isinstance(ref, int) and gpu.index == ref) or gpu.uuid == ref:
                return gpu
        return None

    def reported(self, refs: Iterable[int | str]) -> tuple[str, ...]:
        """The UUIDs of those GPUs this Host's driver reports, once each, in order: what may
        be asked of its engine (an emulated or unseen GPU never is)."""
        return tuple(dict.fromkeys(g.uuid for ref in refs if (g := self.gpu(ref)) is not None))
