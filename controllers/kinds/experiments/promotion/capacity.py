"""A qualification's capacity gate: the same capacity search on both versions, in the room.

Why not side by side: two searches on one Host at once would each measure the other's load
(the GPUs, the decoders, the network are shared), so the candidate is searched first, then a
fresh copy of the running version (the run's ``baseline`` companion, started in the same
room), with the same sources, counts, windows and criteria, as ``type: capacity`` searches:
``CapacityType.execute`` itself runs on each side, through a context that starts that side's
service and writes under ``runs/<side>/``. The running service is never loaded beyond the
canary: a search pushes a service past its breaking point, which production must not see.
The gate reads each side's ``capacity.json`` (``capacity_of``), never what the search returned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from controllers.kinds.experiments.capacity.documents import CAPACITY_FILE, CapacityDocument
from controllers.kinds.experiments.capacity.runtype import CapacityType
from controllers.kinds.experiments.reportparts import cell
from controllers.kinds.experiments.runtype import RunContext
from controllers.kinds.experiments.service import RunService
from specs.experiments.capacity import CapacityExperimentSpec
from specs.experiments.promotion import PromotionExperimentSpec
from specs.models import PromotionCapacity
from state.evidence import Evidence

BASELINE = "baseline"  # the companion: a fresh copy of the running version


def as_capacity(spec: PromotionExperimentSpec, cap: PromotionCapacity) -> CapacityExperimentSpec:
    """The search each side runs: the gate's counts, windows and criteria, a fresh service
    per window, no smoke request (the canary before it proved the service answers)."""
    data = spec.model_dump(mode="json", exclude={"promotion", "type"})
    measurement = {**data["measurement"], "repetitions": 1, "warmupRuns": 0}
    return CapacityExperimentSpec.model_validate({
        **data, "type": "capacity", "measurement": measurement,
        "capacity": {**cap.model_dump(mode="json"), "serviceReuse": False, "smoke": False}})


def search_side(ctx: RunContext[PromotionExperimentSpec], cap: PromotionCapacity, side: str,
                evidence: Evidence, launch: Callable[[frozenset[str]], RunService]) -> None:
    """``side``'s capacity search, its windows' services started by ``launch``, its evidence
    under ``evidence`` (the side's folder), its streams and service logs named for its side.
    Its verdict is not the gate's: ``capacity_of`` reads what it wrote."""
    fields: dict[str, Any] = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}
    fields.update(
        spec=as_capacity(ctx.spec, cap), evidence=evidence, launch=launch,
        progress=lambda message: ctx.progress(f"{side} capacity: {message}"),
        retire_service=lambda service, name: ctx.retire_service(service, f"{side}-{name}"),
        stream_id=lambda part, src: ctx.stream_id(f"{side}-cap-{part}", src))
    side_ctx: RunContext[CapacityExperimentSpec] = RunContext(**fields)
    ctx.progress(f"capacity search on the {side}: {cap.initialStreamCount}.."
                 f"{cap.maxStreamCount} stream(s), {cap.windowSeconds}s windows")
    CapacityType().execute(side_ctx)


def capacity_of(side: Evidence) -> int | None:
    """The side's highest stable stream count, from its ``capacity.json`` (0 when even the
    first count it tried was unstable); None when it did not search, or its search stopped on
    a fault (a fault is no capacity, and the gate is then inconclusive)."""
    document = side.read(CAPACITY_FILE, CapacityDocument)
    if document is None or document.inconclusive:
        return None
    if document.highestStable is None:
        return 0 if document.firstUnstable is not None else None
    return document.highestStable


def capacity_lines(evidence: Evidence, sides: tuple[str, ...], folder: Callable[
        [Evidence, str], Evidence]) -> list[str]:
    """``report.md``'s capacity table: each side's boundary and the windows it took."""
    documents = {side: folder(evidence, side).read(CAPACITY_FILE, CapacityDocument)
                 for side in sides}
    if not any(documents.values()):
        return []
    lines = ["", "### Capacity, searched on each side in turn", "",
             "| side | highest stable | first unstable | windows | stopped |",
             "|---|---|---|---|---|"]
    for side, doc in documents.items():
        if doc is None:
            lines.append(f"| {side} | - | - | - | not searched |")
            continue
        lines.append(f"| {side} | {_shown(doc.highestStable)} | {_shown(doc.firstUnstable)} "
                     f"| {_shown(doc.windowsUsed)} | {cell(doc.inconclusive or '')} |")
    return lines


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)
