"""Rules across resources: unique names and references for every kind, then each kind's own
rules over the set (``SpecKind.set_rules``: the Deployment's and the Experiment's GPU and port
double-booking, run IDs, pairings), so the set's rules are asked of the kinds, not written
for four of them here.

These need the whole spec set but no observation. GPU claims are compared as written here
(index 0 twice); ``specs.hostrules`` catches an index and a UUID naming the same device.
"""

from __future__ import annotations

import functools
import ipaddress

from specs.experiment import R_TEMPLATE, Experiment, check_template
from specs.experiments.benchmark import R_BENCH, BenchmarkExperimentSpec
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
    for declared in SPEC_KINDS.values():  # each kind's own rules over the set
        if declared.set_rules is not None:
            found.extend(declared.set_rules(resources))
    return found


def deployment_set_rules(resources: list[Resource]) -> list[tuple[Resource, Finding]]:
    """The Deployment kind's rules over the set: no GPU of a Host claimed twice, no port of a
    Host published twice on clashing addresses."""
    deployments = [r for r in resources if isinstance(r, Deployment)]
    return _gpu_claims(deployments, {}) + _port_claims(deployments)


def experiment_set_rules(resources: list[Resource]) -> list[tuple[Resource, Finding]]:
    """The Experiment kind's rules over the set: its template suits it, its port and GPUs are
    free of every Deployment's and every other run's, run IDs are unique, pairings are sound."""
    experiments = [r for r in resources if isinstance(r, Experiment)]
    if not experiments:
        return []
    deployments = [r for r in resources if isinstance(r, Deployment)]
    owners: dict[tuple[str, str], str] = {}  # (Host, GPU) -> the Deployment that claims it
    _gpu_claims(deployments, owners)  # its findings are the Deployments' own
    return (_experiments(experiments, deployments)
            + _run_gpus(experiments, deployments, owners) + _pairings(experiments))


def _run_gpus(experiments: list[Experiment], deployments: list[Deployment],
              owners: dict[tuple[str, str], str]) -> list[tuple[Resource, Finding]]:
    """An Experiment's own GPUs (``service.gpus``) are no Deployment's on its template's Host
    (``owners``, from ``_gpu_claims``) and no other run's: a run never shares a GPU, with its
    template or anything else (rule 10)."""
    by_name = {d.metadata.name: d for d in deployments}
    found: list[tuple[Resource, Finding]] = []
    runs: dict[tuple[str, str], str] = {}  # runs may overlap in time: none shares either
    for exp in experiments:
        template = by_name.get(exp.spec.template)
        if template is None:
            continue  # a broken template reference is refused by its own rule
        host = template.spec.host
        if exp.spec.service.gpus is None and template.spec.gpus:
            held = ", ".join(map(str, template.spec.gpus))
            found.append((exp, Finding(("spec", "service"), f"the run's service would use its "
                                       f"template's GPU(s) {held} on Host {host}, which "
                                       f"Deployment {template.metadata.name} holds: a run never "
                                       "shares a GPU (name free ones in spec.service.gpus)",
                                       R10)))
        for i, gpu in enumerate(exp.spec.service.gpus or ()):
            other = owners.get((host, str(gpu)))
            holder = f"Deployment {other}'s" if other is not None else None
            run = runs.setdefault((host, str(gpu)), exp.metadata.name)
            if holder is None and run != exp.metadata.name:
                holder = f"also Experiment {run}'s (runs may overlap)"
            if holder is not None:
                found.append((exp, Finding(("spec", "service", "gpus", i), f"GPU {gpu} on Host "
                                           f"{host} is {holder}: a run never shares a GPU",
                                           R10)))
    return found


def _pairings(experiments: list[Experiment]) -> list[tuple[Resource, Finding]]:
    """A benchmark's ``pairWith`` names the other side of an EVS comparison: where that run is
    in the set, it is a benchmark of the same scenario on the other EVS side, and no chain of
    pairings comes back to the run (each side's gate reads the other's finished evidence, so
    in a cycle one side always finds none)."""
    runs = {e.spec.runId: e for e in experiments}
    cyclic = _on_cycles(runs)
    found: list[tuple[Resource, Finding]] = []
    where = ("spec", "benchmark", "pairWith")
    for exp in experiments:
        spec = exp.spec
        if not isinstance(spec, BenchmarkExperimentSpec) or spec.benchmark.pairWith is None:
            continue
        other = runs.get(spec.benchmark.pairWith)
        if other is None:
            continue  # a finished run whose spec is gone: its evidence is read at the gate
        theirs = other.spec
        if not isinstance(theirs, BenchmarkExperimentSpec):
            found.append((exp, Finding(where, f"run {theirs.runId} is a {theirs.type} run, not "
                                       "a benchmark", R_BENCH)))
        elif theirs.benchmark.scenario != spec.benchmark.scenario:
            found.append((exp, Finding(where, f"run {theirs.runId} runs scenario "
                                       f"{theirs.benchmark.scenario!r}, not "
                                       f"{spec.benchmark.scenario!r}", R_BENCH)))
        elif theirs.benchmark.evs == spec.benchmark.evs:
            side = "EVS" if spec.benchmark.evs else "a baseline"
            found.append((exp, Finding(where, f"run {theirs.runId} is also {side}: a pair is "
                                       "one EVS run and one baseline", R_BENCH)))
        elif spec.runId in cyclic:
            found.append((exp, Finding(where, f"pairing with run {theirs.runId} comes back to "
                                       f"this run: one side of a cycle always gates on "
                                       "evidence that does not exist yet; pair one way",
                                       R_BENCH)))
    return found


def _on_cycles(runs: dict[str, Experiment]) -> set[str]:
    """The runs whose ``pairWith`` chain comes back to them. Each run names at most one
    other, so the pairings form chains that end or close into a loop: every run is walked
    once (following a chain from every run would cost its length each time: 10,000 chained
    runs took minutes)."""
    def paired(run_id: str) -> str | None:
        spec = runs[run_id].spec if run_id in runs else None
        return spec.benchmark.pairWith if isinstance(spec, BenchmarkExperimentSpec) else None

    done: set[str] = set()
    cyclic: set[str] = set()
    for start in runs:
        path: list[str] = []
        on_path: dict[str, int] = {}
        current: str | None = start
        while current is not None and current not in done and current not in on_path:
            on_path[current] = len(path)
            path.append(current)
            current = paired(current)
        if current is not None and current in on_path:  # this walk closed a loop
            cyclic.update(path[on_path[current]:])
        done.update(path)
    return cyclic


def _references(resources: list[Resource], names: set[tuple[str, str]]
                ) -> list[tuple[Resource, Finding]]:
    """Every reference a kind declares (``specs.kinds``) names a resource of the set."""
    found: list[tuple[Resource, Finding]] = []
    known: dict[str, str] = {}  # per kind, built once: many broken references cost one listing
    for res in resources:
        declared = SPEC_KINDS.get(res.kind)
        for ref, name in declared.named(res) if declared is not None else ():
            if ref.checked and (ref.kind, name) not in names:
                if ref.kind not in known:
                    known[ref.kind] = _listing(sorted(n for k, n in names if k == ref.kind))
                found.append((res, Finding(ref.path, f"{ref.kind} {name!r} is not defined "
                                           f"(the {ref.kind} names in this spec set: "
                                           f"{known[ref.kind]})", R_REFERENCE)))
    return found


def _listing(names: list[str], most: int = 10) -> str:
    """``names`` for a message: the first ``most`` and how many more."""
    if not names:
        return "none"
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _experiments(experiments: list[Experiment], deployments: list[Deployment]
                 ) -> list[tuple[Resource, Finding]]:
    """Each Experiment's template exists and suits it; its port is free of every Deployment on
    the template's Host; no two Experiments share a run ID (a run ID is used once)."""
    found: list[tuple[Resource, Finding]] = []
    by_name = {d.metadata.name: d for d in deployments}
    run_ids: dict[str, str] = {}
    ports: dict[tuple[str, int], str] = {}
    published: dict[tuple[str, int], list[Deployment]] = {}
    for dep in deployments if experiments else ():
        published.setdefault((dep.spec.host, dep.spec.port.host), []).append(dep)
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
            for dep in published.get((template.spec.host, exp.spec.service.hostPort), ()):
                if dep is not template:
                    found.append((exp, Finding(
                        ("spec", "service", "hostPort"), f"port {exp.spec.service.hostPort} is "
                        f"Deployment {dep.metadata.name}'s on Host {dep.spec.host}", R_PORT)))
        other = run_ids.setdefault(exp.spec.runId, exp.metadata.name)
        if other != exp.metadata.name:
            found.append((exp, Finding(("spec", "runId"), f"run ID {exp.spec.runId} is also "
                                       f"Experiment {other}'s: a run ID is used once",
                                       R_TEMPLATE)))
    return found


def _gpu_claims(deployments: list[Deployment], owner: dict[tuple[str, str], str]
                ) -> list[tuple[Resource, Finding]]:
    """No GPU of a Host claimed twice; ``owner`` is filled with each GPU's first claimer."""
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
    """No two Deployments publish one port of one Host on addresses that clash: linear in the
    number of Deployments (a spec set of 30,000 once took 84 s compared pair by pair)."""
    claims: dict[tuple[str, int], _Claims] = {}
    found: list[tuple[Resource, Finding]] = []
    for dep in deployments:
        port = dep.spec.port
        claim = claims.setdefault((dep.spec.host, port.host), _Claims())
        other = claim.clash(port.address)
        if other is not None:
            address, name = other
            found.append((dep, Finding(("spec", "port", "host"), f"port {address}:{port.host} "
                                       f"on Host {dep.spec.host} is already published by "
                                       f"Deployment {name}", R_PORT)))
        claim.add(port.address, dep.metadata.name)
    return found


class _Claims:
    """Who published one port of one Host, on which addresses. Two bind addresses clash if they
    are the same address (``::ffff:127.0.0.1`` is ``127.0.0.1``) or either is a wildcard of
    any family (``::`` may take IPv4 too; the Host's own check, ``hostports``, treats every
    wildcard so, and a spec must not pass here what the Host refuses); each question is
    answered from an index, not by comparing every pair."""

    def __init__(self) -> None:
        self.exact: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, tuple[str, str]] = {}
        self.first: tuple[str, str] | None = None  # any claim
        self.wildcard: tuple[str, str] | None = None  # a claim on a wildcard

    def clash(self, address: str) -> tuple[str, str] | None:
        """A claim (address, Deployment) that ``address`` clashes with, if any."""
        ip = bind_address(address)
        if ip in self.exact:
            return self.exact[ip]
        if self.wildcard is not None:
            return self.wildcard
        return self.first if ip.is_unspecified else None

    def add(self, address: str, name: str) -> None:
        ip = bind_address(address)
        self.exact.setdefault(ip, (address, name))
        self.first = self.first or (address, name)
        if ip.is_unspecified:
            self.wildcard = self.wildcard or (address, name)


@functools.lru_cache(maxsize=1024)  # a spec set names a few addresses, thousands of times
def bind_address(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address a socket binds for ``address``: an IPv4-mapped IPv6 address is its IPv4
    address (the kernel treats them as one)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip
