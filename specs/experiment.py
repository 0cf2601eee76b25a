"""The Experiment kind's spec: a run that happens exactly once and leaves verifiable evidence.

An Experiment names a Deployment as its **template**: the run creates its own, fresh service
from that spec (``runtimePolicy: fresh_per_run``), does its work against it, records evidence
under ``<evidenceRoot>/<runId>/`` and cleans up. ``type`` selects what the run does; ``canary``
is the first (``benchmark``, ``capacity`` and ``portValidation`` slot in beside it, each with its
own block, the rest of the spec shared).

The performance contract of ``../shared/contracts/rules.md`` is checked here as pure rules
(``check_experiment``): frozen workload shape, measurement, distinct isolated paths, and the
canary's stream counts and semantic-isolation requirements. Whether the run ID was used before
needs the evidence root, so it is judged at plan time, not here.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Literal, get_args

from pydantic import Field, field_validator

from specs.models import (
    SHA256_PATTERN,
    Deployment,
    EnvValue,
    Metadata,
    Name,
    Strict,
    env_names,
)
from specs.rules import Finding

RUN_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{2,62}$"
LABEL_PATTERN = r"^[a-z][a-z0-9]*( [a-z][a-z0-9]*)*$"  # lowercase words: what a caption says
CANARY_STREAMS = (1, 2, 4, 8, 16, 32)
SOLID_COLOURS = ("RED", "GREEN", "BLUE", "YELLOW", "CYAN", "MAGENTA", "WHITE", "ORANGE")
R_CONTRACT = "Experiment rule: performance contract"
R_CANARY = "Experiment rule: canary"
R_CAPACITY = "Experiment rule: capacity"
R_PORT = "Experiment rule: port validation"
R_BENCH = "Experiment rule: benchmark"
R_PATHS = "Experiment rule: isolated paths"
R_TEMPLATE = "Experiment rule: the template is a Deployment of this spec set"


class CanaryMedia(Strict):
    """A checksum-pinned object image or clip for one canary stream, with the label a correct
    answer names (object recognition instead of colours)."""

    label: str = Field(pattern=LABEL_PATTERN, max_length=64)
    path: str = Field(pattern=r"^/")
    sha256: str = Field(pattern=SHA256_PATTERN)


class CanaryPublisher(Strict):
    """How the canary's synthetic or media sources are published (one labelled RTSP server
    container per source on the template's Host); small by default, since only the colours
    or objects matter and 16 streams share the Host's CPUs with the service."""

    width: int = Field(default=160, ge=16, le=3840)
    height: int = Field(default=120, ge=16, le=2160)
    fps: int = Field(default=5, ge=1, le=60)


class CanarySpec(Strict):
    """The canary: N independent live streams, an optional semantic-isolation gate, then the
    performance part (per-chunk latency, dropped chunks, the ledger of units)."""

    streams: Literal[1, 2, 4, 8, 16, 32]
    semanticIsolation: bool = True
    qualificationOnly: bool = False  # PASS after the isolation gate, no performance part
    media: list[CanaryMedia] = Field(default_factory=list)  # one per stream; required at 32
    answersPerSource: int = Field(default=3, ge=3, le=20)  # source-correct answers required
    chunkDurationSeconds: int = Field(default=2, ge=1, le=60)
    maxTokens: int = Field(default=16, ge=1, le=16384)
    performanceSeconds: int = Field(default=30, ge=5, le=86400)  # per repetition
    freshFrameSeconds: float = Field(default=15, gt=0, le=600)  # coverage per source
    maxP95LatencyMs: float | None = Field(default=None, gt=0)  # FAIL above (None: record only)
    publisher: CanaryPublisher = Field(default_factory=CanaryPublisher)
    # The 1-frame, 1-token smoke request before the performance part: always (true), or only
    # where the contract requires it (unset: runs of 30 minutes or more; false is refused there).
    smoke: bool | None = None


HarnessKnob = Literal[
    "RTVI_BENCHMARK_BLOCKING_STREAM_DELETE", "RTVI_BENCHMARK_STREAM_DELETE_TIMEOUT_SEC",
    "RTVI_BENCHMARK_STREAM_DELETE_RETRY_ATTEMPTS", "RTVI_BENCHMARK_STREAM_DELETE_RETRY_DELAY_SEC",
    "RTVI_BENCHMARK_STREAM_CLEANUP_VERIFY_INTERVAL_SEC",
    "RTVI_BENCHMARK_STREAM_CLEANUP_VERIFY_TIMEOUT_SEC", "RTVI_BENCHMARK_STREAM_STOP_MAX_WORKERS",
    "RTVI_BENCHMARK_FILE_UPLOAD_TIMEOUT_SEC"]
"""The harness's own environment knobs a spec may set (values, never secrets: none of these is
one). ``RTVI_BACKEND`` and ``RTVI_VLM_API_MODE`` are the run's to set, from its service and
``apiMode``."""
HarnessMode = Literal["single_file", "file_burst", "concurrency", "max_live_streams",
                      "single_live_stream", "concurrent_live_streams", "text_embedding",
                      "text_embedding_concurrency"]
LEVEL_MODES = ("file_burst", "concurrency", "concurrent_live_streams")  # --concurrency-levels
# A scenario names a folder of the report directory: no leading dot (".", "..", hidden).
SCENARIO_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$"


class HarnessSpec(Strict):
    """The VSS perf harness in a checkout on the Host: how to start it, and where in its config
    the run writes its report directory and its fresh service's API base (``<url>/v1``). The
    run's CONFIG handle is a copy of ``config`` under the same file name (the harness's BCD
    live-source guard keys on it) with only those keys (and ``vlm_api_mode`` when ``apiMode``
    is set) changed."""

    argv: list[str] = Field(min_length=1, max_length=32)  # [python3, perf/benchmark/...py]
    workdir: str = Field(pattern=r"^/")  # e.g. /opt/vss/services/rtvi/rt-vlm
    config: str = Field(min_length=1, max_length=1000)  # relative to workdir, or absolute
    outputDirKey: str = Field(default="global.output_dir", pattern=r"^[A-Za-z_][\w.-]*$")
    serviceUrlKey: str = Field(default="global.rtvi_backend", pattern=r"^[A-Za-z_][\w.-]*$")
    env: dict[HarnessKnob, str] = Field(default_factory=dict)  # the harness's own knobs

    @field_validator("env")
    @classmethod
    def _plain_values(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not re.fullmatch(r"[A-Za-z0-9_.:/-]{0,64}", value):
                raise ValueError(f"{name}: a harness knob is a short plain value "
                                 "(letters, digits, _ . : / -)")
        return env


class PinnedClip(Strict):
    path: str = Field(pattern=r"^/")
    sha256: str = Field(pattern=SHA256_PATTERN)


class HarnessSearch(Strict):
    """``capacity.harness``: hand the search to the VSS harness's ``max_live_streams`` scenario
    (its windows, its latency threshold, its bisection), seeded by the capacity's
    ``initialStreamCount`` and ``addStreamCount``, so its boundary can be compared with ours on
    the same service. The harness runs as a ``type: benchmark`` run runs it."""

    harness: HarnessSpec
    scenario: str = Field(pattern=SCENARIO_PATTERN)  # a max_live_streams scenario
    binarySearchRefinement: bool | None = None  # unset: the scenario's own
    logStaleSeconds: int = Field(default=600, ge=5, le=86400)  # then inspect, never kill
    smokeClip: PinnedClip | None = None  # the smoke request's video, when the run smokes


class CapacitySpec(Strict):
    """The capacity search (``type: capacity``): the highest stable and first unstable count of
    independent live streams. Seeded as the VSS harness takes it (``initialStreamCount``,
    ``addStreamCount``); every count is judged by one stability window of ``windowSeconds``
    on a fresh service (unless ``serviceReuse`` freezes reuse into the experiment) against the
    success criteria: at least ``minSuccessRate`` of the streams complete, p95 chunk latency
    at most ``maxP95LatencyMs``, no dropped chunk, zero residue after the window."""

    initialStreamCount: int = Field(ge=1, le=1024)
    addStreamCount: int = Field(default=1, ge=1, le=256)
    maxStreamCount: int = Field(ge=1, le=1024)
    windowSeconds: int = Field(default=60, ge=5, le=3600)
    maxP95LatencyMs: float = Field(gt=0)
    minSuccessRate: float = Field(default=1.0, gt=0, le=1)
    serviceReuse: bool = False
    chunkDurationSeconds: int = Field(default=2, ge=1, le=60)
    maxTokens: int = Field(default=16, ge=1, le=16384)
    publisher: CanaryPublisher = Field(default_factory=CanaryPublisher)
    # The smoke request before the first window: always (true), or only where the contract
    # requires it (unset: a budget of 30 minutes or more; false is refused there).
    smoke: bool | None = None
    harness: HarnessSearch | None = None  # the VSS harness searches instead of our windows


IMMUTABLE_REVISION = r"^([0-9a-f]{40}|sha256:[0-9a-f]{64})$"  # a commit or a content digest
Modality = Literal["text", "image", "video"]


class ModelContract(Strict):
    """The model contract, recorded before any code changes (BYOM porting): what the port is
    of, pinned, so the report names exactly what was validated."""

    source: str = Field(min_length=1, max_length=500)  # hf:org/name, ngc:..., a mounted path
    revision: str = Field(pattern=IMMUTABLE_REVISION)  # a branch or tag moves: refused
    processor: str = Field(min_length=1, max_length=200)
    tokenizer: str = Field(min_length=1, max_length=200)
    quantization: str = Field(min_length=1, max_length=100)
    contextLength: int = Field(ge=1, le=10_000_000)
    frameSampling: str = Field(min_length=1, max_length=500)
    kernels: list[str] = Field(default_factory=list, max_length=32)  # custom kernels; []: none


class IntegrationPath(Strict):
    """The first integration path that worked; a patch says why the other three cannot."""

    path: Literal["configuration", "adapter", "plugin", "patch"]
    reason: str | None = Field(default=None, min_length=1, max_length=2000)


class PortMedia(Strict):
    """One labelled, checksum-pinned image or clip: the smoke input of its modality and one
    item of the accuracy set. ``facts``: what a correct answer names; ``absent``: what the
    input does not show (an answer naming it invents it)."""

    path: str = Field(pattern=r"^/")
    sha256: str = Field(pattern=SHA256_PATTERN)
    mediaType: Literal["image", "video"]
    facts: list[str] = Field(min_length=1, max_length=16)
    absent: list[str] = Field(default_factory=list, max_length=16)


class TextCheck(Strict):
    """One labelled text item of the accuracy set: a prompt and what its answer must name
    (and must not)."""

    prompt: str = Field(min_length=1, max_length=10000)
    facts: list[str] = Field(min_length=1, max_length=16)
    absent: list[str] = Field(default_factory=list, max_length=16)


class VideoSampling(Strict):
    """The declared sampling of video requests (sent with every video smoke request)."""

    framesPerChunk: float = Field(default=8, gt=0, le=512)
    useFps: bool = False


class PortValidationSpec(Strict):
    """``type: portValidation``: the BYOM report (``rules.md``, portValidation)."""

    integration: IntegrationPath
    model: ModelContract
    modalities: list[Modality] = Field(min_length=1, max_length=3)
    media: list[PortMedia] = Field(default_factory=list, max_length=64)
    textChecks: list[TextCheck] = Field(default_factory=list, max_length=64)
    videoSampling: VideoSampling = Field(default_factory=VideoSampling)
    minAccuracy: float = Field(default=1.0, gt=0, le=1)
    maxTokens: int = Field(default=64, ge=1, le=16384)
    requestTimeoutSeconds: float = Field(default=120, gt=0, le=3600)
    platforms: list[str] = Field(default_factory=list, max_length=16)  # where it was validated


class BenchmarkSpec(Strict):
    """``type: benchmark``: one scenario of the VSS harness, supervised. The mode and start
    policy are frozen with the run (stream counts are never compared across modes)."""

    harness: HarnessSpec
    scenario: str = Field(pattern=SCENARIO_PATTERN)
    mode: HarnessMode  # the scenario's benchmark_mode, as the harness lists it
    startPolicy: Literal["synchronized", "staggered"] = "synchronized"
    apiMode: Literal["generate_captions", "chat_completions"] | None = None  # None: the config's
    initialStreamCount: int | None = Field(default=None, ge=1, le=4096)
    addStreamCount: int | None = Field(default=None, ge=1, le=1024)
    binarySearchRefinement: bool | None = None
    concurrencyLevels: list[int] = Field(default_factory=list, max_length=32)
    logStaleSeconds: int = Field(default=600, ge=5, le=86400)  # then inspect, never kill
    evs: bool = False  # this run is the EVS side (True) or the non-EVS baseline
    pairWith: str | None = Field(default=None, pattern=RUN_ID_PATTERN)  # the other side's run
    smoke: bool | None = None  # unset: required for budgets of 30 minutes or more
    smokeClip: PinnedClip | None = None  # the 1-frame, 1-token smoke request's video
    smokeTimeoutSeconds: float = Field(default=60, gt=0, le=3600)  # longer: it hangs


class Workload(Strict):
    """What one unit of load is, frozen before the run (the contract's workload shape)."""

    loadUnit: Literal["independent_live_stream", "shared_stream_subscriber", "file_request",
                      "batch_request"] = "independent_live_stream"
    sourceIdentityPolicy: Literal["unique_per_stream", "shared_across_requests",
                                  "not_applicable"] = "unique_per_stream"
    sessionReuse: bool = False
    sourceIdentityCount: int | None = Field(default=None, ge=1)  # default: the largest level


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
    env: dict[str, EnvValue] = Field(default_factory=dict, max_length=16)
    # The run's GPUs when they cannot be the template's (a template that runs holds its own,
    # and a run never shares one): indexes or UUIDs, free of every Deployment on the Host.
    gpus: list[int | str] | None = None

    _env_names = field_validator("env")(classmethod(lambda cls, v: env_names(v)))


class TelemetrySpec(Strict):
    """Where the run's GPU telemetry comes from, and whether the run needs it.

    By default the Host is asked: NVML where the reconciler runs on it, ``nvidia-smi`` over its
    SSH connection otherwise. ``dcgmUrl`` names a DCGM exporter's metrics URL instead (no
    credentials in it: it is recorded in the evidence). ``required``: a run that cannot read
    its telemetry fails in Preflight, before anything starts; otherwise what cannot be read is
    recorded as "not measured", never as zero."""

    dcgmUrl: str | None = Field(default=None, pattern=r"^https?://[^/@\s]+(/\S*)?$",
                                max_length=500)
    required: bool = False
    intervalSeconds: float = Field(default=1.0, ge=0.1, le=60)
    # GPUs (UUIDs) the service uses without being given them through the template's ``gpus``
    # (a device plugin, CDI, an emulated GPU): baselined and proven back after cleanup too.
    gpus: list[str] = Field(default_factory=list, max_length=64)


ExperimentTypeName = Literal["canary", "capacity", "portValidation", "benchmark"]  # = its block


class ExperimentSpec(Strict):
    type: ExperimentTypeName
    runId: str = Field(pattern=RUN_ID_PATTERN)
    template: Name  # a Deployment
    service: ServiceOverride
    runtimePolicy: Literal["fresh_per_run"] = "fresh_per_run"
    cachePolicy: Literal["empty", "content-addressed-read-only",
                         "empty-or-content-addressed-read-only"] = "empty"
    evidenceRoot: str | None = Field(default=None, pattern=r"^/")  # default: under the state dir
    paths: RunPaths = Field(default_factory=RunPaths)
    budgetSeconds: int = Field(default=1800, ge=60, le=7 * 86400)  # the whole run, cleanup too
    cleanupSeconds: int = Field(default=300, ge=10, le=3600)  # one shared cleanup deadline
    workload: Workload = Field(default_factory=Workload)
    measurement: Measurement
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    canary: CanarySpec | None = None
    capacity: CapacitySpec | None = None
    portValidation: PortValidationSpec | None = None
    benchmark: BenchmarkSpec | None = None


class Experiment(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Experiment"]
    metadata: Metadata
    spec: ExperimentSpec


def check_experiment(resource: Experiment) -> list[Finding]:
    """Every observation-free Experiment rule; paths are relative to the document root."""
    spec = resource.spec
    return [Finding(("spec", *f.path), f.message, f.rule, f.severity)
            for f in (*_contract(spec), *_paths(spec), *_blocks(spec), *_canary(spec),
                      *_capacity(spec), *_capacity_harness(spec), *_port(spec),
                      *_bench(spec), *_budget(spec))]


MIN_RUN_S = 60  # what a run needs besides its cleanup, at the least (service, sources, gates)


def _budget(spec: ExperimentSpec) -> Iterator[Finding]:
    if spec.budgetSeconds < spec.cleanupSeconds + MIN_RUN_S:
        yield Finding(("budgetSeconds",), f"{spec.budgetSeconds}s cannot hold the "
                      f"{spec.cleanupSeconds}s kept for cleanup plus a run of at least "
                      f"{MIN_RUN_S}s", R_CONTRACT)


def largest_level(spec: ExperimentSpec) -> int:
    """The most units the run offers at once (a canary: its streams; a capacity search: its
    maximum)."""
    if spec.canary is not None:
        return spec.canary.streams
    return spec.capacity.maxStreamCount if spec.capacity is not None else 1


# Each type's own block; the others are refused.
TYPE_BLOCKS: tuple[str, ...] = get_args(ExperimentTypeName)


def _blocks(spec: ExperimentSpec) -> Iterator[Finding]:
    if getattr(spec, spec.type) is None:
        yield Finding((spec.type,), f"a {spec.type} Experiment needs its {spec.type} block",
                      R_CONTRACT)
    for other in TYPE_BLOCKS:
        if other != spec.type and getattr(spec, other) is not None:
            yield Finding((other,), f"a {other} block in a {spec.type} Experiment: it would "
                          f"not run (remove it, or set type: {other})", R_CONTRACT)


def _bench(spec: ExperimentSpec) -> Iterator[Finding]:
    bench = spec.benchmark
    if spec.type != "benchmark" or bench is None:
        return
    if bench.pairWith == spec.runId:
        yield Finding(("benchmark", "pairWith"), "a run cannot be paired with itself",
                      R_BENCH)
    if bench.concurrencyLevels and bench.mode not in LEVEL_MODES:
        yield Finding(("benchmark", "concurrencyLevels"), f"the harness ignores concurrency "
                      f"levels in {bench.mode}: they belong to {', '.join(LEVEL_MODES)}",
                      R_BENCH)
    seeds = (bench.initialStreamCount, bench.addStreamCount, bench.binarySearchRefinement)
    if any(v is not None for v in seeds) and bench.mode != "max_live_streams":
        yield Finding(("benchmark", "initialStreamCount"), "stream-count seeds and binary "
                      "search refinement belong to max_live_streams", R_BENCH)
    if smokes(spec) and bench.smokeClip is None:
        yield Finding(("benchmark", "smokeClip"), "the run smokes first (a budget of 30 "
                      "minutes or more, or smoke: true): name the pinned clip of its 1-frame, "
                      "1-token request", R_CONTRACT)
    yield from _smoke_refused("benchmark", bench.smoke, spec)


def _port(spec: ExperimentSpec) -> Iterator[Finding]:
    port = spec.portValidation
    if spec.type != "portValidation" or port is None:
        return
    if port.integration.path == "patch" and not port.integration.reason:
        yield Finding(("portValidation", "integration", "reason"), "a patch needs the reason "
                      "configuration, an adapter and a plugin cannot work", R_PORT)
    if len(set(port.modalities)) != len(port.modalities):
        yield Finding(("portValidation", "modalities"), "a modality is listed twice", R_PORT)
    for modality in ("image", "video"):
        has = [m for m in port.media if m.mediaType == modality]
        if modality in port.modalities and not has:
            yield Finding(("portValidation", "media"), f"{modality} is claimed: give at least "
                          f"one labelled {modality} (mediaType: {modality}) to smoke it with",
                          R_PORT)
        if has and modality not in port.modalities:
            yield Finding(("portValidation", "modalities"), f"{modality} media are given but "
                          f"{modality} is not claimed: claim it, or remove them", R_PORT)
    if not port.media and not port.textChecks:
        yield Finding(("portValidation", "media"), "the accuracy gate needs a labelled set: "
                      "media (images, clips) or textChecks", R_PORT)
    for i, media in enumerate(port.media):
        clash = {f.lower() for f in media.facts} & {a.lower() for a in media.absent}
        if clash:
            yield Finding(("portValidation", "media", i, "absent"), f"{', '.join(sorted(clash))}"
                          " is both shown and absent", R_PORT)


def _capacity_harness(spec: ExperimentSpec) -> Iterator[Finding]:
    cap = spec.capacity
    if spec.type != "capacity" or cap is None or cap.harness is None:
        return
    if cap.serviceReuse:
        yield Finding(("capacity", "serviceReuse"), "the harness runs its windows on one "
                      "service: serviceReuse belongs to our own search", R_CAPACITY)
    if smokes(spec) and cap.harness.smokeClip is None:
        yield Finding(("capacity", "harness", "smokeClip"), "the run smokes first (a budget of "
                      "30 minutes or more, or smoke: true): name the pinned clip of its "
                      "1-frame, 1-token request", R_CONTRACT)


def _capacity(spec: ExperimentSpec) -> Iterator[Finding]:
    cap = spec.capacity
    if spec.type != "capacity" or cap is None:
        return
    if cap.initialStreamCount > cap.maxStreamCount:
        yield Finding(("capacity", "initialStreamCount"), f"{cap.initialStreamCount} is above "
                      f"maxStreamCount {cap.maxStreamCount}", R_CAPACITY)
    if spec.workload.loadUnit != "independent_live_stream":
        yield Finding(("workload", "loadUnit"), "a capacity search counts independent live "
                      "streams (independent_live_stream)", R_CAPACITY)
    measure = spec.measurement
    if measure.repetitions != 1 or measure.warmupRuns:
        yield Finding(("measurement", "repetitions"), "a capacity search judges each count by "
                      "one stability window: set repetitions 1 and warmupRuns 0 (a longer "
                      "windowSeconds measures longer)", R_CAPACITY)
    yield from _smoke_refused("capacity", cap.smoke, spec)


def _smoke_refused(block: str, smoke: bool | None, spec: ExperimentSpec) -> Iterator[Finding]:
    """``smoke: false`` where the budget says the run lasts 30 minutes or more."""
    if smoke is False and spec.budgetSeconds >= SMOKE_FROM_S:
        yield Finding((block, "smoke"), f"a run with a budget of {spec.budgetSeconds}s "
                      "(30 minutes or more) must pass the 1-frame, 1-token smoke request first",
                      R_CONTRACT)


def _contract(spec: ExperimentSpec) -> Iterator[Finding]:
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
    level = largest_level(spec)
    if (work.loadUnit == "independent_live_stream" and work.sourceIdentityCount is not None
            and work.sourceIdentityCount < level):
        yield Finding(("workload", "sourceIdentityCount"), f"{work.sourceIdentityCount} source "
                      f"identities for {level} concurrent streams: reusing a source measures "
                      "subscribers, not independent streams", R_CONTRACT)


def _paths(spec: ExperimentSpec) -> Iterator[Finding]:
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


def _canary(spec: ExperimentSpec) -> Iterator[Finding]:
    canary = spec.canary
    if spec.type != "canary" or canary is None:
        return
    if spec.workload.loadUnit != "independent_live_stream":
        yield Finding(("workload", "loadUnit"), "a canary's streams are independent live "
                      "streams (independent_live_stream)", R_CANARY)
    if canary.media and len(canary.media) != canary.streams:
        yield Finding(("canary", "media"), f"{len(canary.media)} media entries for "
                      f"{canary.streams} streams: give one per stream", R_CANARY)
    if canary.streams == 32 and not canary.media:
        yield Finding(("canary", "streams"), "32 streams need checksum-pinned object media "
                      "(canary.media, one per stream); synthetic colours stop at 16", R_CANARY)
    yield from _media_labels([m.label for m in canary.media])
    if not canary.semanticIsolation and canary.streams >= 2:
        yield Finding(("canary", "semanticIsolation"), f"{canary.streams} streams need the "
                      "semantic-isolation gate: streams that answer for each other make every "
                      "number after it meaningless", R_CANARY)
    if canary.semanticIsolation and canary.streams < 2:
        yield Finding(("canary", "semanticIsolation"), "semantic isolation needs 2 or more "
                      "streams", R_CANARY)
    if canary.smoke is False and needs_smoke(spec):
        yield Finding(("canary", "smoke"), f"a performance part of {performance_seconds(spec)}s "
                      f"(30 minutes or more) must pass the 1-frame, 1-token smoke request first",
                      R_CONTRACT)
    if canary.qualificationOnly and not canary.semanticIsolation:
        yield Finding(("canary", "qualificationOnly"), "qualificationOnly stops after the "
                      "semantic-isolation gate: turn semanticIsolation on", R_CANARY)


def _media_labels(labels: list[str]) -> Iterator[Finding]:
    """Every canary source needs its own answer: no label twice, none inside another."""
    for i, label in enumerate(labels):
        if label in labels[:i]:
            yield Finding(("canary", "media", i, "label"), f"label {label!r} is used twice: "
                          "every source needs its own answer", R_CANARY)
        words = set(label.split())
        clash = next((o for o in labels if o != label and set(o.split()) >= words), None)
        if clash is not None:
            yield Finding(("canary", "media", i, "label"), f"every word of {label!r} is also in "
                          f"{clash!r}: an answer for one would count for the other", R_CANARY)


SMOKE_FROM_S = 1800  # the contract: a run longer than 30 minutes smokes first


def performance_seconds(spec: ExperimentSpec) -> int:
    """How long the performance part captions, warm-up included (0 without one)."""
    canary = spec.canary
    if canary is None or canary.qualificationOnly:
        return 0
    runs = spec.measurement.warmupRuns + spec.measurement.repetitions
    return runs * canary.performanceSeconds


def needs_smoke(spec: ExperimentSpec) -> bool:
    return performance_seconds(spec) >= SMOKE_FROM_S


def smokes(spec: ExperimentSpec) -> bool:
    """Whether the run sends the smoke request (asked for, or required)."""
    for block in (spec.capacity, spec.benchmark):
        if block is not None:
            asked = block.smoke
            return asked is True or (asked is None and spec.budgetSeconds >= SMOKE_FROM_S)
    canary = spec.canary
    if canary is None or canary.qualificationOnly:
        return False
    return canary.smoke is True or (canary.smoke is None and needs_smoke(spec))


def solid_labels(streams: int) -> list[str]:
    """The probe labels of synthetic canary sources: one colour each up to 8; at 16 every
    colour twice, once SOLID and once with a contrasting BORDER."""
    if streams <= len(SOLID_COLOURS):
        return [c.lower() for c in SOLID_COLOURS[:streams]]
    return [f"{c.lower()} {style}" for c in SOLID_COLOURS for style in ("solid", "border")]


def check_template(resource: Experiment, template: Deployment | None) -> list[Finding]:
    """The run's template, judged against the Experiment (a cross-resource rule)."""
    spec = resource.spec
    if template is None:
        return [Finding(("spec", "template"), f"Deployment {spec.template!r} is not defined: the "
                        "run copies its service from it", R_TEMPLATE)]
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
    return found


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

