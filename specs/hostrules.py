"""Deployment rules that need a Host's observed facts (checked at plan time).

GPU presence and exclusivity (rule 10) and the NVFP4 capability floor (rule 3) depend on what
the Host really has, so they are judged against ``HostFacts`` — by compute capability, never by
matching a product name.
"""

from __future__ import annotations

from specs.environment import NVFP4_MIN_COMPUTE_CAPABILITY, NVFP4_PRESET
from specs.facts import HostFacts
from specs.models import Deployment
from specs.rules import R3, R10, Finding


def check_against_host(deployment: Deployment, facts: HostFacts) -> list[Finding]:
    """Judge one Deployment against its Host's facts."""
    findings: list[Finding] = []
    spec = deployment.spec
    assigned = []
    for i, ref in enumerate(spec.gpus):
        gpu = facts.gpu(ref)
        if gpu is None:
            have = ", ".join(f"{g.index}={g.uuid}" for g in facts.gpus) or "no GPUs"
            findings.append(Finding(("spec", "gpus", i), f"Host {facts.name} has no GPU {ref!r} "
                                    f"(it has {have})", R10))
        else:
            assigned.append(gpu)
    if spec.model.preset == NVFP4_PRESET:
        floor = NVFP4_MIN_COMPUTE_CAPABILITY
        weak = [g for g in assigned if g.capability < floor]
        if weak or not assigned:
            shown = ", ".join(f"GPU {g.index} {g.name} cc {g.compute_capability}" for g in weak)
            offer = f"Host {facts.name} assigns {shown}" if weak else "no GPU is assigned"
            findings.append(Finding(("spec", "model", "preset"), f"{NVFP4_PRESET} needs compute "
                                    f"capability >= {floor[0]}.{floor[1]} on every assigned GPU; "
                                    f"{offer}", R3))
    return findings


def check_gpu_exclusivity(
    deployments: list[Deployment], facts: HostFacts
) -> list[tuple[Deployment, Finding]]:
    """Two Deployments on one Host never claim the same GPU UUID (an index and a UUID can name
    the same device, which only the facts reveal)."""
    owner: dict[str, str] = {}
    found: list[tuple[Deployment, Finding]] = []
    for deployment in deployments:
        for i, ref in enumerate(deployment.spec.gpus):
            gpu = facts.gpu(ref)
            if gpu is None:
                continue
            other = owner.get(gpu.uuid)
            if other is not None and other != deployment.metadata.name:
                found.append((deployment, Finding(("spec", "gpus", i), f"GPU {gpu.index} "
                              f"({gpu.uuid}) is already claimed by Deployment {other}", R10)))
            owner.setdefault(gpu.uuid, deployment.metadata.name)
    return found
