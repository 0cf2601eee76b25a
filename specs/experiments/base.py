"""What every experiment type's spec shares, and the base each type's spec extends.

An Experiment names a Deployment as its **template**: the run creates its own, fresh service
from that spec (``runtimePolicy: fresh_per_run``), does its work against it, records evidence
under ``<evidenceRoot>/<runId>/`` and cleans up. ``type`` selects what the run does, and its
block of the same name says how (``canary:``, ``capacity:``, ...): each type's spec is a
subclass of :class:`ExperimentSpecBase` in its own module beside this one, and
``specs.experiment`` joins them into one union tagged by ``type`` — so a canary's spec has a
``canary`` block by construction, and code given one never unwraps an optional block.

The performance contract of ``../shared/contracts/rules.md`` shared by every type is checked
here as pure rules (frozen workload shape, measurement, distinct isolated paths, the budget);
each type adds its own (``type_findings``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any, ClassVar, Literal, get_args

from pydantic import Discriminator, Field, Tag, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from specs.models import (
    SHA256_PATTERN,
    TAG_ERROR,
    TAG_MARK,
    AbsolutePath,
    EnvValue,
    Gpu,
    Name,
    Strict,
    TelemetrySpec,
    env_names,
)
from specs.rules import Finding
from specs.trust import reads
from specs.values import free_text

RUN_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{2,62}$"
R_CONTRACT = "Experiment rule: performance contract"
R_PATHS = "Experiment rule: isolated paths"
SMOKE_FROM_S = 1800  # the contract: a run longer than 30 minutes smokes first
MIN_RUN_S = 60  # what a run needs besides its cleanup, at the least (service, sources, gates)


class CanaryPublisher(Strict):
    """How the canary's synthetic or media sources are published (one labelled RTSP server
    container per source on the template's Host); small by default, since only the colours
    or objects matter and 16 streams share the Host's CPUs with the service."""

    width: int = Field(default=160, ge=16, le=3840)
    height: int = Field(default=120, ge=16, le=2160)
    fps: int = Field(default=5, ge=1, le=60)



class PinnedClip(Strict):
    path: AbsolutePath = reads("media")
    sha256: str = Field(pattern=SHA256_PATTERN)



class Workload(Strict):
    """What one unit of load is, frozen before the run (the contract's workload shape)."""

    loadUnit: Literal["independent_live_stream", "shared_stream_subscriber", "file_request",
                      "batch_request"] = "independent_live_stream"
    sourceIdentityPolicy: Literal["unique_per_stream", "shared_across_requests",
                                  "not_applicable"] = "unique_per_stream"
    sessionReuse: bool = False
    # default: the largest level
    sourceIdentityCount: int | None = Field(default=None, ge=1, le=4096)


LatencySource = Literal["ntp_timestamp", "processing_latency"]
Metric = Literal["chunk_latency_ms", "dropped_chunks", "fresh_frame_coverage", "gpu_memory_mib"]


def _default_metrics() -> list[Metric]:
    return ["chunk_latency_ms", "dropped_chunks"]


class Measurement(Strict):
    """How the run measures, frozen with it: warm-up, repetitions, metrics, and the claim the
    numbers are for (a sentence a reader of the evidence can check them against)."""

    warmupRuns: int = Field(default=0, ge=0, le=100)
    repetitions: int = Field(default=1, ge=1, le=100)
    metrics: list[Metric] = Field(default_factory=_default_metrics, min_length=1)
    claim: str = Field(min_length=1, max_length=500)
    published: bool = False  # a published number: the template must be a perf profile (rule 7)
    # How chunk latency is measured: "ntp_timestamp", the VSS harness's way and comparable with
    # BCD results (receive time - media_info.end_timestamp, the chunk's last frame as the
    # source stamped it: source, transport and queueing included), or "processing_latency",
    # the server's own chunk_latency_ms (a real server may fill it only with request profiling
    # on, ENABLE_REQUEST_PROFILING).
    latencySource: LatencySource = "ntp_timestamp"


class RunPaths(Strict):
    """Where the run writes, each under ``<evidenceRoot>/<runId>/`` and pairwise distinct."""

    output: str = "output"
    scratch: str = "scratch"
    mutableCache: str = "cache"


class ServiceOverride(Strict):
    """The run's own service differs from its template only in where it listens: its port and,
    for a service that reads its port from the environment (``network: host``), the variables
    that say so. Everything else is the template's, so the run measures what is deployed."""

    hostPort: int = Field(ge=1024, le=65535)
    env: dict[str, EnvValue] = free_text(default_factory=dict, max_length=16)
    # The run's GPUs when they cannot be the template's (a template that runs holds its own,
    # and a run never shares one): indexes or UUIDs, free of every Deployment on the Host.
    gpus: list[Gpu] | None = Field(default=None, max_length=64)

    _env_names = field_validator("env")(classmethod(lambda cls, v: env_names(v)))


TYPE_NAMES: list[str] = []
"""Every experiment type's name, which is also the name of its block (filled as each type's
spec class is defined)."""


class ExperimentSpecBase(Strict):
    """The fields every experiment type shares. A subclass declares ``type`` as a Literal of
    its name and its block under the same name; it overrides what differs by type."""

    type: str
    runId: str = Field(pattern=RUN_ID_PATTERN)
    template: Name  # a Deployment
    service: ServiceOverride
    runtimePolicy: Literal["fresh_per_run"] = "fresh_per_run"
    cachePolicy: Literal["empty", "content-addressed-read-only",
                         "empty-or-content-addressed-read-only"] = "empty"
    # default: under the state directory
    evidenceRoot: AbsolutePath | None = reads("evidence", default=None)
    paths: RunPaths = Field(default_factory=RunPaths)
    budgetSeconds: int = Field(default=1800, ge=60, le=7 * 86400)  # the whole run, cleanup too
    cleanupSeconds: int = Field(default=300, ge=10, le=3600)  # one shared cleanup deadline
    # Where the run executes: ``host`` (the default, issue 27), as a job on its template's Host
    # beside the service it measures, outliving the reconciler; ``reconciler``, in the
    # reconciler's process (no runner image to build; a restart ends it INCONCLUSIVE).
    executor: Literal["reconciler", "host"] = "host"
    workload: Workload = Field(default_factory=Workload)
    measurement: Measurement
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)

    TYPE: ClassVar[str] = ""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        (cls.TYPE,) = get_args(cls.model_fields["type"].annotation)
        TYPE_NAMES.append(cls.TYPE)

    @model_validator(mode="before")
    @classmethod
    def _one_block(cls, data: Any) -> Any:
        """Its own block is required and another type's is refused, in words that say why
        (a bare "required field" or "unknown field" would not). Another type's block left
        empty (``canary:`` or ``canary: null``) is no block."""
        if not isinstance(data, dict):
            return data
        errors = [InitErrorDetails(type=PydanticCustomError(
            "experiment_block", f"a {cls.TYPE} Experiment needs its {cls.TYPE} block"),
            loc=(cls.TYPE,), input=data)] if data.get(cls.TYPE) is None else []
        errors += [InitErrorDetails(type=PydanticCustomError(
            "experiment_block", f"a {other} block in a {cls.TYPE} Experiment: it would not run "
            f"(remove it, or set type: {other})"), loc=(other,), input=data[other])
            for other in TYPE_NAMES if other != cls.TYPE and data.get(other) is not None]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return {k: v for k, v in data.items() if k not in TYPE_NAMES or k == cls.TYPE}

    def largest_level(self) -> int:
        """The most units the run offers at once (a canary: its streams; a capacity search:
        its maximum)."""
        return 1

    def smokes(self) -> bool:
        """Whether the run sends the 1-frame, 1-token smoke request (asked for, or required)."""
        return False

    def type_findings(self) -> Iterator[Finding]:
        """This type's own observation-free rules (paths relative to ``spec``)."""
        return iter(())

    def least_measuring(self) -> tuple[float, tuple[str, ...], str] | None:
        """The least time this run measures for, whatever it finds (seconds), the field that
        sets it and what it is, for the budget rule: a run whose budget cannot hold its own
        measurement would be stopped by its deadline every time (None: no such floor)."""
        return None

    def single_waits(self) -> list[tuple[float, tuple[str, ...], str]]:
        """Each single wait the spec sets itself (seconds, its field, what it is): a request
        timeout, a silence before the log is inspected. One that outlasts the budget less
        cleanup is cut short by the run's deadline every time it matters, so it is refused
        (a default is left alone: it is the type's, not a choice that contradicts the budget)."""
        return []

    def read_runs(self) -> list[str]:
        """Earlier runs whose evidence this run reads (an EVS pair's other side): a run that
        executes as a job is given their evidence documents on its Host."""
        return []

    def findings(self) -> list[Finding]:
        """Every observation-free rule: the shared contract, then the type's own."""
        return [*_contract(self), *_paths(self), *self.type_findings(), *_budget(self)]

    def budget_smokes(self, smoke: bool | None) -> bool:
        """A block's ``smoke`` as the contract reads it: asked for, or unset with a budget of
        30 minutes or more."""
        return smoke is True or (smoke is None and self.budgetSeconds >= SMOKE_FROM_S)

    def smoke_refused(self, block: str, smoke: bool | None) -> Iterator[Finding]:
        """``smoke: false`` where the budget says the run lasts 30 minutes or more."""
        if smoke is False and self.budgetSeconds >= SMOKE_FROM_S:
            yield Finding((block, "smoke"), f"a run with a budget of {self.budgetSeconds}s "
                          "(30 minutes or more) must pass the 1-frame, 1-token smoke request "
                          "first", R_CONTRACT)


def _budget(spec: ExperimentSpecBase) -> Iterator[Finding]:
    if spec.budgetSeconds < spec.cleanupSeconds + MIN_RUN_S:
        yield Finding(("budgetSeconds",), f"{spec.budgetSeconds}s cannot hold the "
                      f"{spec.cleanupSeconds}s kept for cleanup plus a run of at least "
                      f"{MIN_RUN_S}s", R_CONTRACT)
        return
    least = spec.least_measuring()
    if least is not None and spec.budgetSeconds < spec.cleanupSeconds + least[0]:
        seconds, path, what = least
        yield Finding(path, f"{what} takes at least {seconds:g}s, more than budgetSeconds "
                      f"{spec.budgetSeconds} less the {spec.cleanupSeconds}s kept for cleanup: "
                      "the run could never finish measuring", R_CONTRACT)
    for seconds, path, what in spec.single_waits():
        if spec.budgetSeconds < spec.cleanupSeconds + seconds:
            yield Finding(path, f"{what} of {seconds:g}s is longer than budgetSeconds "
                          f"{spec.budgetSeconds} less the {spec.cleanupSeconds}s kept for "
                          "cleanup: the run's deadline would always end it first", R_CONTRACT)



def _contract(spec: ExperimentSpecBase) -> Iterator[Finding]:
    work = spec.workload
    identity = {"independent_live_stream": ("unique_per_stream", False),
                "shared_stream_subscriber": ("shared_across_requests", True)}.get(work.loadUnit)
    if identity is None:
        if work.sourceIdentityPolicy != "not_applicable":
            yield Finding(("workload", "sourceIdentityPolicy"), f"a {work.loadUnit} workload has "
                          "no source identity: set not_applicable", R_CONTRACT)
    else:
        policy, reuse = identity
        if work.sourceIdentityPolicy != policy:
            yield Finding(("workload", "sourceIdentityPolicy"), f"{work.loadUnit} needs "
                          f"sourceIdentityPolicy {policy}", R_CONTRACT)
        if work.sessionReuse != reuse:
            yield Finding(("workload", "sessionReuse"), f"{work.loadUnit} needs sessionReuse "
                          f"{str(reuse).lower()}", R_CONTRACT)
    level = spec.largest_level()
    if (work.loadUnit == "independent_live_stream" and work.sourceIdentityCount is not None
            and work.sourceIdentityCount < level):
        yield Finding(("workload", "sourceIdentityCount"), f"{work.sourceIdentityCount} source "
                      f"identities for {level} concurrent streams: reusing a source measures "
                      "subscribers, not independent streams", R_CONTRACT)


def _paths(spec: ExperimentSpecBase) -> Iterator[Finding]:
    seen: dict[str, str] = {}
    for field in ("output", "scratch", "mutableCache"):
        raw = getattr(spec.paths, field)
        norm = posixpath.normpath(raw)
        if raw.startswith("/") or norm == "." or norm.startswith(".."):
            yield Finding(("paths", field), f"{raw!r} must be a relative path inside "
                          "<evidenceRoot>/<runId>/", R_PATHS)
            continue
        other = next((f for f, p in seen.items() if p == norm or p.startswith(norm + "/")
                      or norm.startswith(p + "/")), None)
        if other is not None:
            yield Finding(("paths", field), f"{raw!r} overlaps paths.{other}: output, scratch "
                          "and mutableCache must be distinct", R_PATHS)
        seen[field] = norm


def member(spec: type[ExperimentSpecBase]) -> Tag:
    """The tag of an experiment type's spec in the union (``type=<name>``: an error inside it
    is located under that, which the loader drops from the path it shows, ``TAG_MARK``)."""
    return Tag(f"{TAG_MARK}{spec.TYPE}")


def chosen_by_type(*members: type[ExperimentSpecBase]) -> Discriminator:
    """The chooser of a union of ``members``: its ``type``; a missing or unknown one is one
    error naming the members' types, in the order given (``TAG_ERROR``)."""
    def choose(value: Any) -> str | None:
        name = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return f"{TAG_MARK}{name}" if isinstance(name, str) else None
    names = ", ".join(m.TYPE for m in members)
    return Discriminator(choose, custom_error_type=TAG_ERROR,
                         custom_error_message=f"must be one of {names}")
