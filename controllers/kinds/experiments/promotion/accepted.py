"""``baseline: lastAccepted``: the running version's numbers from the run that promoted it.

Why: measuring the running version again for every candidate doubles the load a qualification
puts on the Host (and its capacity search doubles the windows). The run that promoted the
running version measured it already, as its candidate: each qualification keeps what it
measured of its candidate in ``evidence/promotion-measured.json`` (the chunk latencies, the
dropped chunks, isolation, capacity and GPU memory, with the load and the platform they were
measured under). A later qualification reads that file from the accepted run's bundle (its
Deployment's record names the run per version; a job is given the file on its Host) and
compares its candidate with it, provided it was measured under the same load on the same
Host and GPU model. Otherwise (no accepted run, another load, another GPU model, a file that
cannot be read) it measures side by side, and its decision says why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import Field

from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.promotion.gates import Measured
from specs.experiments.promotion import PromotionExperimentSpec
from state.evidence import MANIFEST, Document, Evidence

MEASURED_FILE = "evidence/promotion-measured.json"
ROLE = "baseline"  # the earlier run's role (``ExperimentType.earlier``)


class MeasuredDocument(Document):
    """``evidence/promotion-measured.json``: what a qualification measured of its candidate."""

    load: dict[str, Any] = Field(default_factory=dict)
    platform: dict[str, Any] = Field(default_factory=dict)
    measured: dict[str, Any] = Field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Baseline:
    """Where the baseline's numbers come from: ``measured`` read from run ``run`` (None:
    measure it side by side, ``why``)."""

    measured: Measured | None
    run: str | None
    why: str

    def record(self) -> dict[str, Any]:
        return {"from": "lastAccepted" if self.measured is not None else "sideBySide",
                "run": self.run, "why": self.why}


SIDE_BY_SIDE = Baseline(None, None, "measured now, beside the candidate (baseline: sideBySide)")


def load_of(spec: PromotionExperimentSpec) -> dict[str, Any]:
    """The load a side is measured under: two sides compare only under the same one."""
    gates = spec.promotion.gates
    measure = spec.measurement
    return {"canary": spec.promotion.canary.model_dump(mode="json"),
            "capacity": gates.capacity.model_dump(mode="json") if gates.capacity else None,
            "latencySource": measure.latencySource, "warmupRuns": measure.warmupRuns,
            "repetitions": measure.repetitions}


def platform_of(run: Evidence) -> dict[str, Any] | None:
    """The Host and its GPU models, as the run's manifest recorded them (None: unreadable)."""
    manifest = run.read(MANIFEST, RunManifest)
    if manifest is None or manifest.host is None:
        return None
    gpus = manifest.host.facts.get("gpus")
    models = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict)}
                    ) if isinstance(gpus, list) else []
    return {"host": manifest.host.name, "gpuModels": models}


def keep_candidate(run: Evidence, spec: PromotionExperimentSpec, measured: Measured) -> None:
    """What this run measured of its candidate, for the qualification after its promotion."""
    run.write(MEASURED_FILE, MeasuredDocument(
        load=load_of(spec), platform=platform_of(run) or {},
        measured={**dataclasses.asdict(measured),
                  "chunk_latencies_ms": list(measured.chunk_latencies_ms)}))


def baseline_for(run: Evidence, spec: PromotionExperimentSpec, earlier: str | None) -> Baseline:
    """The running version's numbers from ``earlier`` (the run that promoted it), or why they
    cannot stand in for measuring it now."""
    if spec.promotion.baselineFrom != "lastAccepted":
        return SIDE_BY_SIDE
    if earlier is None:
        return Baseline(None, None, "no accepted qualification of the running version on "
                        "record (it was not promoted by one): measured side by side")
    accepted = Evidence(run.folder.parent / earlier, run.redactor)
    found = accepted.read(MEASURED_FILE, MeasuredDocument)
    if found is None:
        return Baseline(None, earlier, f"run {earlier} kept no measurements of its candidate "
                        f"({MEASURED_FILE}): measured side by side")
    if found.load != load_of(spec):
        return Baseline(None, earlier, f"run {earlier} measured under another load (canary, "
                        "capacity search or latency source): measured side by side")
    here = platform_of(run)
    if here is None or found.platform != here:
        then = found.platform or "an unrecorded platform"
        return Baseline(None, earlier, f"run {earlier} measured on {then}, this run on "
                        f"{here or 'an unrecorded one'} (another Host or GPU model): measured "
                        "side by side")
    try:
        data = dict(found.measured)
        data["chunk_latencies_ms"] = tuple(float(v) for v in data.get(
            "chunk_latencies_ms") or [])
        measured = Measured(**data)
    except (TypeError, ValueError):
        return Baseline(None, earlier, f"run {earlier}'s measurements do not read: measured "
                        "side by side")
    return Baseline(measured, earlier, f"the running version's numbers from run {earlier}, "
                    "which promoted it (same load, Host and GPU model)")
