"""Rules across resources: unique names, references, GPU and port double-booking.

These need the whole spec set but no observation. GPU claims are compared as written here
(index 0 twice); ``specs.hostrules`` catches an index and a UUID naming the same device.
"""

from __future__ import annotations

import ipaddress

from specs.experiment import R_TEMPLATE, Experiment, check_template
from specs.kinds import SPEC_KINDS
from specs.models import Deployment
from specs.models import Resource as BuiltinResource
from specs.rules import R10, Finding

R_UNIQUE = "names are unique per kind"
R_REFERENCE = "references name an existing resource"
R_PORT = "published ports are unique per Host"
Resource = BuiltinResource | Experiment  # every kind a spec set may hold


def check_set(resources: list[Resource]) -> list[tuple[Resource, Finding]]:
    """Findings for the set, each attached to the resource whose document should change."""
    found: list[tuple[Resource, Finding]] = []
    seen: set[tuple[str, str]] = set()
    for res in resources:
        key = (res.kind, res.metadata.name)
        if key in seen:
            found.append((res, Finding(("metadata", "name"), f"another {res.kind} is already "
                                       f"named {res.metadata.name}", R_UNIQUE)))
        seen.add(key)
    found.extend(_references(resources, seen))
    deployments = [r for r in resources if isinstance(r, Deployment)]
    found.extend(_gpu_claims(deployments))
    found.extend(_port_claims(deployments))
    found.extend(_experiments([r for r in resources if isinstance(r, Experiment)], deployments))
    return found


def _references(resources: list[Resource], names: set[tuple[str, str]]
                ) -> list[tuple[Resource, Finding]]:
    """Every reference a kind declares (``specs.kinds``) names a resource of the set."""
    found: list[tuple[Resource, Finding]] = []
    for res in resources:
        declared = SPEC_KINDS.get(res.kind)
        for ref, name in declared.named(res) if declared is not None else ():
            if ref.checked and (ref.kind, name) not in names:
                known = ", ".join(sorted(n for k, n in names if k == ref.kind)) or "none"
                found.append((res, Finding(ref.path, f"{ref.kind} {name!r} is not defined "
                                           f"(the {ref.kind} names in this spec set: {known})",
                                           R_REFERENCE)))
    return found


def _experiments(experiments: list[Experiment], deployments: list[Deployment]
                 ) -> list[tuple[Resource, Finding]]:
    """Each Experiment's template exists and suits it; its port is free of every Deployment on
    the template's Host; no two Experiments share a run ID (a run ID is used once)."""
    found: list[tuple[Resource, Finding]] = []
    by_name = {d.metadata.name: d for d in deployments}
    run_ids: dict[str, str] = {}
    ports: dict[tuple[str, int], str] = {}
    for exp in experiments:
        template = by_name.get(exp.spec.template)
        found += [(exp, f) for f in check_template(exp, template)]
        if template is not None:
            taken = ports.setdefault((template.spec.host, exp.spec.service.hostPort),
                                     exp.metadata.name)
            if taken != exp.metadata.name:
                found.append((exp, Finding(("spec", "service", "hostPort"), f"port "
                                           f"{exp.spec.service.hostPort} is also Experiment "
                                           f"{taken}'s on Host {template.spec.host}", R_PORT)))
            for dep in deployments:
                if (dep is not template and dep.spec.host == template.spec.host
                        and dep.spec.port.host == exp.spec.service.hostPort):
                    found.append((exp, Finding(
                        ("spec", "service", "hostPort"), f"port {exp.spec.service.hostPort} is "
                        f"Deployment {dep.metadata.name}'s on Host {dep.spec.host}", R_PORT)))
        other = run_ids.setdefault(exp.spec.runId, exp.metadata.name)
        if other != exp.metadata.name:
            found.append((exp, Finding(("spec", "runId"), f"run ID {exp.spec.runId} is also "
                                       f"Experiment {other}'s: a run ID is used once",
                                       R_TEMPLATE)))
    return found


def _gpu_claims(deployments: list[Deployment]) -> list[tuple[Resource, Finding]]:
    owner: dict[tuple[str, str], str] = {}
    found: list[tuple[Resource, Finding]] = []
    for dep in deployments:
        for i, gpu in enumerate(dep.spec.gpus):
            key = (dep.spec.host, str(gpu))
            other = owner.setdefault(key, dep.metadata.name)
            if other != dep.metadata.name:
                found.append((dep, Finding(("spec", "gpus", i), f"GPU {gpu} on Host "
                                           f"{dep.spec.host} is already claimed by Deployment "
                                           f"{other}", R10)))
    return found


def _port_claims(deployments: list[Deployment]) -> list[tuple[Resource, Finding]]:
    claimed: list[tuple[str, str, int, str]] = []
    found: list[tuple[Resource, Finding]] = []
    for dep in deployments:
        port = dep.spec.port
        for host, address, number, name in claimed:
            if host == dep.spec.host and number == port.host and _overlap(address, port.address):
                found.append((dep, Finding(("spec", "port", "host"), f"port {address}:{number} "
                                           f"on Host {host} is already published by Deployment "
                                           f"{name}", R_PORT)))
        claimed.append((dep.spec.host, port.address, port.host, dep.metadata.name))
    return found


def _overlap(a: str, b: str) -> bool:
    """Two bind addresses clash if equal or either is a wildcard of the same family."""
    ia, ib = ipaddress.ip_address(a), ipaddress.ip_address(b)
    return ia == ib or (ia.version == ib.version and (ia.is_unspecified or ib.is_unspecified))
