"""The Experiment kind's spec: a run that happens exactly once and leaves verifiable evidence.

``spec`` is one of the experiment types' specs, chosen by ``type`` (a union tagged by it): each
type's spec, with its block and its rules, lives in its own module of ``specs/experiments/``
(``base`` holds what they share). A new type is a module there and a member below.

Whether the run ID was used before needs the evidence root, so it is judged at plan time, not
here; the template is judged against the spec set (``check_template``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import ValidationError

from specs.experiments.base import R_CONTRACT, chosen_by_type, member
from specs.experiments.benchmark import BenchmarkExperimentSpec
from specs.experiments.canary import CanaryExperimentSpec
from specs.experiments.capacity import CapacityExperimentSpec
from specs.experiments.portvalidation import PortValidationExperimentSpec
from specs.experiments.promotion import R_PROMOTION_RUN, PromotionExperimentSpec
from specs.models import API_VERSION, Deployment, Metadata, Strict
from specs.rules import Finding, check_deployment

R_TEMPLATE = "Experiment rule: the template is a Deployment of this spec set"

ExperimentSpec = Annotated[
    Annotated[CanaryExperimentSpec, member(CanaryExperimentSpec)]
    | Annotated[CapacityExperimentSpec, member(CapacityExperimentSpec)]
    | Annotated[PortValidationExperimentSpec, member(PortValidationExperimentSpec)]
    | Annotated[BenchmarkExperimentSpec, member(BenchmarkExperimentSpec)]
    | Annotated[PromotionExperimentSpec, member(PromotionExperimentSpec)],
    chosen_by_type(CanaryExperimentSpec, CapacityExperimentSpec, PortValidationExperimentSpec,
                   BenchmarkExperimentSpec, PromotionExperimentSpec)]


class Experiment(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Experiment"]
    metadata: Metadata
    spec: ExperimentSpec


PROMOTION_SUFFIX = "-promotion"
RUN_ID_HASH_CHARS = 16


def qualification_name(deployment: str) -> str:
    """The Experiment a Deployment's ``spec.promotion`` makes (a name of at most 63)."""
    return deployment[:63 - len(PROMOTION_SUFFIX)].rstrip("-") + PROMOTION_SUFFIX


def derive_qualification(dep: Deployment, candidate: str) -> list[Experiment]:
    """The qualification run of ``dep``'s candidate (its spec hash ``candidate``): none
    without ``spec.promotion``. Its run ID names the candidate and the gates, so one candidate
    is qualified once under one set of gates."""
    promotion = dep.spec.promotion
    if promotion is None:
        return []
    name = dep.metadata.name
    load = promotion.gates.canary
    frozen = json.dumps(promotion.model_dump(mode="json"), sort_keys=True)
    digest = hashlib.sha256(f"{candidate}\n{frozen}".encode()).hexdigest()
    run_id = f"{name[:40].rstrip('-')}-q-{digest[:RUN_ID_HASH_CHARS]}"
    return [Experiment.model_validate({
        "apiVersion": API_VERSION, "kind": "Experiment",
        "metadata": {"name": qualification_name(name),
                     "labels": {"rtvi.reconciler/derived-from": f"Deployment.{name}"}},
        "spec": {
            "type": "promotion", "runId": run_id, "template": name,
            "service": {"hostPort": promotion.candidate.port,
                        "gpus": list(promotion.candidate.gpus), "env": promotion.candidate.env},
            "telemetry": promotion.candidate.telemetry.model_dump(mode="json"),
            "budgetSeconds": promotion.budgetSeconds,
            "cleanupSeconds": promotion.cleanupSeconds,
            "measurement": {"warmupRuns": load.warmupRuns, "repetitions": load.repetitions,
                            "latencySource": load.latencySource,
                            "metrics": ["chunk_latency_ms", "dropped_chunks", "gpu_memory_mib"],
                            "claim": f"Deployment {name}'s candidate {candidate[:12]} against "
                                     "the version it runs, under the same live load"},
            "promotion": {
                "deployment": name, "candidate": candidate,
                "baseline": dep.spec.port.model_dump(mode="json"),
                "baselineFrom": promotion.baseline,
                "canary": {"streams": load.streams, "performanceSeconds":
                           load.performanceSeconds, "chunkDurationSeconds":
                           load.chunkDurationSeconds},
                "gates": promotion.gates.model_dump(mode="json")}}})]


def check_experiment(resource: Experiment) -> list[Finding]:
    """Every observation-free Experiment rule; paths are relative to the document root."""
    return [Finding(("spec", *f.path), f.message, f.rule, f.severity)
            for f in resource.spec.findings()]


def check_template(resource: Experiment, template: Deployment | None) -> list[Finding]:
    """The run's template, judged against the Experiment (a cross-resource rule)."""
    spec = resource.spec
    if template is None:
        return [Finding(("spec", "template"), f"Deployment {spec.template!r} is not defined: the "
                        "run copies its service from it", R_TEMPLATE)]
    if spec.type == "promotion" and (template.spec.promotion is None or resource.metadata.name
                                     != qualification_name(template.metadata.name)):
        return [Finding(("spec", "type"), "a promotion run is made by its Deployment's "
                        "spec.promotion, never written: declare spec.promotion on Deployment "
                        f"{spec.template} instead", R_PROMOTION_RUN)]
    found = []
    if spec.measurement.published and template.spec.profile != "perf":
        found.append(Finding(("spec", "measurement", "published"), f"a published number needs "
                             f"a perf-profile template (Deployment {spec.template} is "
                             f"{template.spec.profile}): prefix caching and the MM preprocessor "
                             "cache off (Deployment rule 7)", R_CONTRACT))
    if "read-only" in spec.cachePolicy and spec.cachePolicy != "empty":
        for i, mount in enumerate(template.spec.mounts):
            if not mount.readOnly:
                found.append(Finding(("spec", "cachePolicy"), f"cachePolicy {spec.cachePolicy} "
                                     f"needs read-only mounts, but Deployment {spec.template} "
                                     f"mounts {mount.source} read-write (spec.mounts[{i}])",
                                     R_CONTRACT))
    if spec.service.hostPort == template.spec.port.host:
        found.append(Finding(("spec", "service", "hostPort"), f"port {spec.service.hostPort} is "
                             f"the template's own: the run's fresh service needs another",
                             R_TEMPLATE))
    return found + _copy_findings(spec, template)


def run_deployment(template: Deployment, spec: ExperimentSpec) -> Deployment:
    """The template as the run deploys it: its own port (and the variables that name it)."""
    data = template.model_dump(mode="json")
    port = dict(data["spec"]["port"], host=spec.service.hostPort)
    if template.spec.network == "host":  # the service listens on the port itself
        port["container"] = spec.service.hostPort
    data["spec"]["port"] = port
    data["spec"].pop("promotion", None)  # the run's service is measured, never promoted
    data["spec"]["env"] = {**data["spec"]["env"], **spec.service.env}
    if spec.service.gpus is not None:
        data["spec"]["gpus"] = list(spec.service.gpus)
    return Deployment.model_validate(data)


def _copy_findings(spec: ExperimentSpec, template: Deployment) -> list[Finding]:
    """The Deployment rules, judged on the run's copy of its template where the run changes
    it (``service.env``, ``service.gpus``): an override must not bring in what the template
    itself could not declare (a MODEL_PATH out of its mounts, eager mode, remote code)."""
    if not spec.service.env and spec.service.gpus is None:
        return []  # only the port differs, and the template's own rules judged the rest
    try:
        copy = run_deployment(template, spec)
    except ValidationError as exc:
        return [Finding(("spec", "service"), f"the run's copy of Deployment {spec.template} is "
                        f"not a valid Deployment: {_errors(exc)}", R_TEMPLATE)]
    own = {(f.path, f.message) for f in check_deployment(template)}
    return [Finding(_override_path(f.path, spec), f"the run's copy of Deployment "
                    f"{spec.template} breaks a rule: {f.message}", f.rule, f.severity)
            for f in check_deployment(copy) if (f.path, f.message) not in own]


def _errors(exc: ValidationError, most: int = 3) -> str:
    """pydantic's own messages, where they point (no input value is quoted)."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:most])


def _override_path(path: tuple[str | int, ...], spec: ExperimentSpec) -> tuple[str | int, ...]:
    """Where in the Experiment a finding on the copy points: the override that caused it."""
    if path[:2] == ("spec", "env") and len(path) > 2 and path[2] in spec.service.env:
        return ("spec", "service", "env", path[2])
    if path[:2] == ("spec", "gpus") and spec.service.gpus is not None:
        return ("spec", "service", "gpus", *path[2:])
    return ("spec", "service")


PROFILING = "ENABLE_REQUEST_PROFILING"


def measure_warnings(spec: ExperimentSpec, template_env: dict[str, str]) -> list[str]:
    """What ``plan`` warns of: a measure the run asks for that its service, as the template
    starts it, would not report (the run then records it as "not measured (why)")."""
    found = []
    profiling = str(template_env.get(PROFILING, "")).strip().lower() in ("1", "true", "yes", "on")
    if spec.measurement.latencySource == "processing_latency" and not profiling:
        found.append(f"latencySource processing_latency reads the server's chunk_latency_ms, "
                     f"which RT-VLM fills with request profiling on: the template does not set "
                     f"{PROFILING}=true, so latency may be 'not measured' (ntp_timestamp, the "
                     "default, needs no profiling)")
    return found

