"""The registry of experiment types: ``spec.type`` → its implementation.

The run and the Experiment kind look a type up here and hold it to ``runtype.ExperimentType``;
neither names a type. A new type is a module and a line below.
"""

from __future__ import annotations

from typing import Any

from controllers.kinds.experiments.benchmark.runtype import BenchmarkType
from controllers.kinds.experiments.canary.runtype import CanaryType
from controllers.kinds.experiments.capacity.runtype import CapacityType
from controllers.kinds.experiments.portvalidation.runtype import PortValidationType
from controllers.kinds.experiments.promotion.runtype import PromotionType
from controllers.kinds.experiments.runtype import ExperimentType
from specs.experiment import ExperimentSpec

TYPES: dict[str, ExperimentType[Any]] = {t.name: t for t in (
    CanaryType(), CapacityType(), PortValidationType(), BenchmarkType(), PromotionType())}


def run_type(spec: ExperimentSpec) -> ExperimentType[Any]:
    """The implementation of ``spec.type`` (the spec's Literal admits only registered ones)."""
    return TYPES[spec.type]
