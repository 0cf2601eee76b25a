"""``type: promotion``: the qualification of a Deployment's candidate against its running version.

Nobody writes one: a Deployment with ``spec.promotion`` makes it (``derive``, in
``specs.experiment``), so it is part of the spec set, planned, run as a job on the Host,
recovered and shown like any Experiment. Its template is the Deployment as Git now asks for it
(the candidate), started fresh in the room ``spec.promotion.candidate`` names; the baseline is
the service that runs now, at the Deployment's own port, measured under the same canary load in
the same window (or, with ``baseline: lastAccepted``, the numbers the run that promoted it
measured). Its run ID names the candidate (the Deployment's spec hash), so a candidate is
qualified once, and a new commit is a new candidate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from specs.experiments.base import ExperimentSpecBase
from specs.experiments.canary import CanarySpec
from specs.models import SHA256_PATTERN, Name, PortSpec, PromotionGates, Strict
from specs.rules import Finding

R_PROMOTION_RUN = "Experiment rule: a promotion run is made by its Deployment"


class PromotionRunSpec(Strict):
    """What the qualification measures and judges, frozen with its run."""

    deployment: Name  # whose candidate it qualifies (its template)
    candidate: str = Field(pattern=SHA256_PATTERN)  # the Deployment's spec hash it qualifies
    baseline: PortSpec  # where the running service is published on the Host
    # Where the baseline's numbers come from (``spec.promotion.baseline``).
    baselineFrom: Literal["sideBySide", "lastAccepted"] = "sideBySide"
    canary: CanarySpec
    gates: PromotionGates = Field(default_factory=PromotionGates)


class PromotionExperimentSpec(ExperimentSpecBase):
    type: Literal["promotion"]
    promotion: PromotionRunSpec

    def largest_level(self) -> int:
        return self.promotion.canary.streams

    def least_measuring(self) -> tuple[float, tuple[str, ...], str] | None:
        canary, measure = self.promotion.canary, self.measurement
        seconds = (measure.warmupRuns + measure.repetitions) * canary.performanceSeconds
        return (seconds, ("promotion", "canary", "performanceSeconds"),
                "the qualification's performance part (warm-up and repetitions)")

    def type_findings(self) -> Iterator[Finding]:
        if self.template != self.promotion.deployment:
            yield Finding(("promotion", "deployment"), f"a promotion run qualifies its template "
                          f"({self.template}), not Deployment {self.promotion.deployment}",
                          R_PROMOTION_RUN)
