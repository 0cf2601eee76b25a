"""What a Host's record says about it (``ResourceStatus.facts``; see ``controllers.facts``)."""

from __future__ import annotations

from typing import Literal

from controllers.facts import Facts
from specs.facts import GpuInfo


class HostStatusFacts(Facts):
    """A Host: how we reach it and what answered there."""

    docker: str = ""
    reachable: bool | None = None
    engine_version: str | None = None
    api_version: str | None = None
    os: str | None = None
    gpus: list[GpuInfo] | Literal["none"] | None = None
    gpu_probe: str | None = None
