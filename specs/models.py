"""Pydantic models of the resource kinds (``apiVersion: rtvi.reconciler/v1``).

Models are strict: unknown fields are errors (a typo must not silently become a default), and
scalars are not coerced across types except env values, which YAML users naturally write as
``true`` or ``8000``. Rules that span fields live in ``specs.rules``; rules that span resources
in ``specs.crossref``; rules that need a Host's observed facts in ``specs.hostrules``.
"""

from __future__ import annotations

import ipaddress
import math
import posixpath
import re
from collections.abc import Callable
from typing import Annotated, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)

from specs.errors import one_line
from specs.trust import reads
from specs.values import free_text

API_VERSION = "rtvi.reconciler/v1"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A label key, as Kubernetes and Docker's reverse-DNS convention write it: an optional DNS
# subdomain prefix and "/", then a name of up to 63 characters.
LABEL_KEY_RE = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                          r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
DEFAULT_DOCKER_URL = "unix:///var/run/docker.sock"
DEFAULT_CONTAINER_PORT = 8000
DEFAULT_READINESS_TIMEOUT_S = 1800
PRESET_NAMES = ("cr3-nano-reasoner-fp8", "cr3-nano-reasoner-nvfp4")


class Strict(BaseModel):
    """Base for every spec model: unknown fields refused, no silent type coercion."""

    # defer_build: a model is compiled on its first use, so a command that never meets an
    # Experiment does not pay for compiling the Experiment models at start-up.
    # allow_inf_nan=False: ``.inf``, ``.nan`` and ``1e400`` (which YAML reads as infinity)
    # are refused in every number field, named by pydantic as "finite number".
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True,
                              allow_inf_nan=False)


def _env_value(value: object) -> object:
    """YAML gives ``true``/``8000``/``0.5`` for env values; the container sees strings. A
    ``.inf`` or ``.nan`` would reach it as ``inf``/``nan``: refused, as in any number field."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a non-finite number (.inf, .nan) is no value for a variable: quote it "
                         "if the text is meant")
    if isinstance(value, int | float):
        return str(value)
    return value


ENV_VALUE_MAX_CHARS = 32768
EnvValue = Annotated[str, BeforeValidator(_env_value), Field(max_length=ENV_VALUE_MAX_CHARS)]


def normal_path_problem(value: str) -> str | None:
    """Why ``value`` is not an absolute path written in its normal form (None: it is). Rules
    compare paths by prefix (a MODEL_PATH inside a read-only mount), so ``/models/../etc``
    must never pass as being under ``/models``: such a path is refused, not guessed at."""
    if not value.startswith("/"):
        return "must be an absolute path (starting with /)"
    normal = "/" + posixpath.normpath(value).lstrip("/")
    if normal != value:
        return (f"must be written in normal form, without '.', '..', '//' or a trailing '/' "
                f"(normalised: {normal!r})")
    return None


def _absolute_path(value: str) -> str:
    problem = normal_path_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


AbsolutePath = Annotated[str, Field(min_length=1, max_length=4096),
                         AfterValidator(_absolute_path)]
"""A file or folder path: absolute and normalised (see ``normal_path_problem``)."""
# A Docker image reference, full-match (Docker's own grammar): [registry[:port]/]path[:tag]
# [@algorithm:hex]; never a leading '-' (an option to a command line) nor a space.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"
IMAGE_PATTERN = (rf"^(?:{_DOMAIN}(?::[0-9]{{1,5}})?/)?{_COMPONENT}(?:/{_COMPONENT})*"
                 r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z0-9][A-Za-z0-9+._:-]*)?$")
"""The digest is only shaped here; Deployment rule 1 says what a pinned one must be."""
SSH_URL_RE = re.compile(r"ssh://(?:(?P<user>[A-Za-z_][A-Za-z0-9_.-]{0,31})@)?"
                        r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?"
                        r"|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?/?")


def url_problem(value: str, schemes: tuple[str, ...]) -> str | None:
    """Why ``value`` is not a URL of one of ``schemes`` with a host (never starting with '-',
    which a command line would read as an option; a bracketed one an IPv6 address) and, when
    it has a port, one in 1..65535, with no spaces anywhere (None: it is)."""
    if any(c.isspace() for c in value):
        return "is not a valid URL: it holds a space (percent-encode it as %20)"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    if parts.scheme not in schemes:
        return f"must be a {' or '.join(s + '://' for s in schemes)} URL"
    if not parts.hostname or parts.hostname.startswith("-") or "%" in parts.hostname:
        return "must name a host (not starting with '-', no IPv6 scope ID)"
    if ":" in parts.hostname and not _is_ipv6(parts.hostname):
        return f"[{parts.hostname}] is not an IPv6 address"
    after = parts.netloc.rpartition("@")[2].partition("]")[2] if "[" in parts.netloc else ""
    if after and not re.fullmatch(r":[0-9]{1,5}", after):
        return f"{after[:40]!r} after the bracketed address is not :PORT"
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        return "its port is empty or 0: give one in 1..65535, or none for the default"
    return None


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def image_problem(value: str) -> str | None:
    """Why an image reference that has the grammar's shape is still not one Docker can pull:
    a registry port out of 1..65535 (None: it is fine)."""
    registry, slash, _ = value.partition("/")
    if slash and ":" in registry:
        port = registry.rsplit(":", 1)[1]
        if port.isdigit() and not 1 <= int(port) <= 65535:
            return f"the registry's port {port} is not in 1..65535"
    return None


def split_ssh_url(value: str) -> tuple[str | None, str, int | None] | None:
    """``ssh://[user@]host[:port]`` as (user, host without brackets, port), by the one pattern
    the spec is validated with; None when it is not one (or its port is not in 1..65535)."""
    match = SSH_URL_RE.fullmatch(value)
    if match is None or (match["port"] is not None and not 1 <= int(match["port"]) <= 65535):
        return None
    return (match["user"], match["host"].strip("[]"),
            int(match["port"]) if match["port"] is not None else None)


def docker_url_problem(value: str) -> str | None:
    """Why ``value`` is neither ``unix:///absolute/socket`` nor ``ssh://[user@]host[:port]``
    (None: it is one)."""
    if value.startswith("unix://"):
        problem = normal_path_problem(value.removeprefix("unix://"))
        return None if problem is None else f"the socket path {problem}"
    match = SSH_URL_RE.fullmatch(value)
    if match is None:
        return ("must be unix:///path/to/docker.sock or ssh://[user@]host[:port] (a user and "
                "host never start with '-')")
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        return f"port {match['port']} is not in 1..65535"
    if match["host"].startswith("[") and not _is_ipv6(match["host"].strip("[]")):
        return f"{match['host']} is not an IPv6 address"
    return None


def checked(problem: Callable[[str], str | None]) -> AfterValidator:
    """A validator that refuses a value with the message ``problem`` gives for it."""

    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(found)
        return value
    return AfterValidator(check)


MountPath = Annotated[AbsolutePath, checked(
    lambda p: "a mount of / (the whole filesystem) is refused: mount the folder the service "
              "needs" if p == "/" else None)]
GpuIndex = Annotated[int, Field(ge=0, le=1023)]
GpuId = Annotated[str, Field(min_length=1, max_length=200)]
Gpu = GpuIndex | GpuId
"""A GPU: its index on the Host or its UUID (``GPU-…``, ``MIG-…``)."""
Name = Annotated[str, Field(pattern=NAME_PATTERN)]


def _normal_if_absolute(path: str) -> str | None:
    """An absolute path in its normal form (``/models/../etc`` is ``/etc``), whatever the
    field's other rules say of it."""
    return normal_path_problem(path) if path.startswith("/") else None


class Metadata(Strict):
    """Identity of a resource: a DNS-label-like name plus free-form labels."""

    name: Name
    labels: dict[str, Annotated[str, Field(max_length=256)]] = Field(default_factory=dict,
                                                                     max_length=64)

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not LABEL_KEY_RE.fullmatch(key):
                raise ValueError(f"label key {one_line(key[:80])!r} is not [prefix/]name: a "
                                 "DNS subdomain prefix, then up to 63 of letters, digits, "
                                 "'-', '_', '.', starting and ending alphanumeric")
        return value


TAG_MARK = "type="
"""How a member of a union chosen by ``type`` is named in a pydantic error's location
(``spec.type=canary.canary.streams``): not a field, so the loader drops it from the path."""
TAG_ERROR = "type_choice"
"""The pydantic error of such a union whose ``type`` is missing or names no member."""


class SpecResource(Protocol):
    """What every kind's spec model has (apiVersion, kind, metadata, spec): a built-in kind's
    or one registered later (a spec set holds both)."""

    @property
    def kind(self) -> str: ...

    @property
    def metadata(self) -> Metadata: ...

    @property
    def spec(self) -> BaseModel: ...


# --- Host -----------------------------------------------------------------------------------


class SshSettings(Strict):
    """How to reach an engine over SSH: never auto-accept host keys, so both files are required."""

    keyFile: AbsolutePath = reads("ssh")
    knownHostsFile: AbsolutePath = reads("ssh")
    socket: AbsolutePath = "/var/run/docker.sock"


REGISTRY_PATTERN = rf"^{_DOMAIN}(?::[0-9]{{1,5}})?$"
"""A registry as an image reference names it: ``nvcr.io``, ``127.0.0.1:5443`` (no scheme)."""


class SecretSource(Strict):
    """Where a credential's value is read at the moment of use: exactly one of the two."""

    fromEnv: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    fromFile: AbsolutePath | None = reads("secrets", default=None)


class RegistryLogin(Strict):
    """Credentials for one registry, by reference: the password is read when a pull needs it
    and reaches the Host's engine only in that call (NGC: username ``$oauthtoken``, password
    the NGC API key)."""

    server: Annotated[str, Field(max_length=260, pattern=REGISTRY_PATTERN),
                      checked(lambda v: image_problem(v + "/x"))]
    username: str = Field(min_length=1, max_length=256, pattern=r"^[^\s:]+$")
    password: SecretSource


class ImageSources(Strict):
    """Where the Host's engine gets the images it lacks, beyond their own registries, and what
    becomes of the ones the reconciler brought once nothing uses them."""

    # A registry that mirrors the others (same repository paths, same digests): every image
    # is pulled from it, for a Host that reaches no other registry.
    mirror: Annotated[str, Field(max_length=260, pattern=REGISTRY_PATTERN),
                      checked(lambda v: image_problem(v + "/x"))] | None = None
    # ``docker save`` archives on the reconciler's machine, loaded into the Host's engine when
    # an image they hold is missing there (an air-gapped Host).
    archives: list[Annotated[AbsolutePath, reads("images")]] = Field(default_factory=list,
                                                                     max_length=64)
    # Remove an image the reconciler pulled or loaded once its Deployment moved off it (or
    # was deleted) and no container uses it; no other image is ever removed.
    prune: bool = False


class HostSpec(Strict):
    """A Docker engine: a local socket (``unix://``) or ``ssh://user@host[:port]``."""

    docker: Annotated[str, Field(max_length=300), checked(docker_url_problem)] = (
        DEFAULT_DOCKER_URL)
    ssh: SshSettings | None = None
    registries: list[RegistryLogin] = Field(default_factory=list, max_length=32)
    images: ImageSources = Field(default_factory=ImageSources)


class Host(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Host"]
    metadata: Metadata
    spec: HostSpec = Field(default_factory=HostSpec)

    @property
    def is_ssh(self) -> bool:
        return self.spec.docker.startswith("ssh://")


# --- Deployment -----------------------------------------------------------------------------


class ModelSpec(Strict):
    """Which model the RT-VLM container loads (``VLM_MODEL_TO_USE``, ``MODEL_PATH``, …).

    Either a ``preset`` (rules.md rule 3) or ``use`` + ``path``. These are the only source of the
    model variables: setting them in ``env`` is refused, so there is one place to look.
    """

    preset: Literal["cr3-nano-reasoner-fp8", "cr3-nano-reasoner-nvfp4"] | None = None
    use: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    path: str | None = Field(default=None, min_length=1, max_length=1000)
    implementationPath: Annotated[str, checked(_normal_if_absolute)] | None = Field(
        default=None, min_length=1, max_length=1000)
    revision: str | None = Field(default=None, min_length=1, max_length=200)
    architecture: str | None = Field(default=None, min_length=1, max_length=200)


def env_names(value: dict[str, str]) -> dict[str, str]:
    """Every key an environment variable name (a spec's ``env`` maps, wherever they appear)."""
    for key in value:
        if not re.match(ENV_NAME_PATTERN, key):
            raise ValueError(f"invalid environment variable name {key!r}")
    return value


class PortSpec(Strict):
    """Where the service's port 8000 is published on the Host. Loopback by default: exposing a
    model server beyond the machine must be a deliberate choice."""

    host: int = Field(ge=1, le=65535)
    address: str = "127.0.0.1"
    container: int = Field(default=DEFAULT_CONTAINER_PORT, ge=1, le=65535)

    @field_validator("address")
    @classmethod
    def _ip_literal(cls, value: str) -> str:
        import ipaddress

        if "%" in value:
            raise ValueError("an IPv6 scope ID (%...) is not accepted in a bind address")
        ipaddress.ip_address(value)
        return value


def _kernel_target(path: str) -> str | None:
    """Docker refuses a bind over ``/proc`` (and one over ``/sys`` hides the kernel's view)."""
    for kernel in ("/proc", "/sys"):
        if path == kernel or path.startswith(kernel + "/"):
            return f"{kernel} is the kernel's inside the container: mount somewhere else"
    return None


class MountSpec(Strict):
    """A bind mount; read-only unless said otherwise (models and code should not be mutated)."""

    source: MountPath = reads("mounts")  # a folder of the Host: the operator allows it
    target: Annotated[MountPath, checked(_kernel_target)]
    readOnly: bool = True


class SecretRef(Strict):
    """A secret passed to the container as env ``name``; the value is read only at use."""

    name: str = Field(pattern=ENV_NAME_PATTERN)
    fromEnv: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    fromFile: AbsolutePath | None = reads("secrets", default=None)


class EagerJustification(Strict):
    """Eager mode costs throughput; turning it on must say why and when it goes away (rule 6)."""

    blocker: str = free_text(min_length=1)
    performanceImpact: str = free_text(min_length=1)
    removalCondition: str = free_text(min_length=1)


class NonStandard(Strict):
    """Marks a deliberate deviation from a standard setting (rules 7 and 8), with its reason."""

    reason: str = free_text(min_length=1)


class Readiness(Strict):
    """Readiness budget (rule 11). Real model loads take minutes; 30 minutes is the default."""

    timeoutSeconds: int = Field(default=DEFAULT_READINESS_TIMEOUT_S, ge=1, le=86400)
    pollSeconds: float = Field(default=1.0, ge=0.01, le=60)


PERCENT_RE = re.compile(r"[0-9]{1,3}(\.[0-9]{1,2})?%")


def _percent_problem(text: str) -> str | None:
    """A share of the baseline's value, written as a percentage (``10%``, ``150%``)."""
    if PERCENT_RE.fullmatch(text) is None:
        return f"{text!r} is not a percentage: write how much slower is allowed, e.g. 10%"
    return None


class TelemetrySpec(Strict):
    """Where the run's GPU telemetry comes from, and whether the run needs it.

    By default it is read where the run executes: a job on its Host (``executor: host``) reads
    NVML, else ``nvidia-smi``, there, given the watched GPUs its driver reports (to read, not
    to compute); a run in the reconciler reads NVML where the reconciler runs on the Host,
    ``nvidia-smi`` over its SSH connection otherwise. ``dcgmUrl`` names a DCGM exporter's
    metrics URL instead (no credentials in it: it is recorded in the evidence). ``required``:
    a run that cannot read its telemetry fails in Preflight, before anything starts; otherwise
    what cannot be read is recorded as "not measured", never as zero."""

    dcgmUrl: Annotated[str, Field(pattern=r"^https?://[^/@\s]+(/\S*)?$", max_length=500),
                       checked(lambda u: url_problem(u, ("http", "https")))] | None = None
    required: bool = False
    intervalSeconds: float = Field(default=1.0, ge=0.1, le=60)
    # GPUs (UUIDs) the service uses without being given them through the template's ``gpus``
    # (a device plugin, CDI, an emulated GPU): baselined and proven back after cleanup too.
    gpus: list[str] = Field(default_factory=list, max_length=64)


class PromotionRoom(Strict):
    """Where the candidate is measured beside the running service: spare room on the same
    Host (its own published port and, on a GPU Host, GPUs no Deployment holds)."""

    port: int = Field(ge=1024, le=65535)
    gpus: list[Gpu] = Field(default_factory=list, max_length=64)
    # For a service on the Host's network, which reads its port from its environment: the
    # variables that say so (``RTVI_EMU_PORT: "18100"``); nothing else of the candidate differs.
    env: dict[str, EnvValue] = free_text(default_factory=dict, max_length=16)
    # How the candidate's GPU memory is read (an Experiment's ``telemetry``): what it leaves
    # allocated after it stops is the GPU-memory gate.
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)

    _env_names = field_validator("env")(classmethod(lambda cls, v: env_names(v)))


class PromotionCanary(Strict):
    """The live load both sides are measured under, at the same time: ``streams`` synthetic
    sources (each side its own streams of the same sources), semantic isolation first, then
    the performance part whose per-chunk latencies the judge compares."""

    streams: Literal[2, 4, 8, 16] = 4
    performanceSeconds: int = Field(default=30, ge=5, le=3600)
    warmupRuns: int = Field(default=0, ge=0, le=10)
    repetitions: int = Field(default=1, ge=1, le=20)
    chunkDurationSeconds: int = Field(default=2, ge=1, le=60)
    # How a chunk's latency is measured (an Experiment's ``measurement.latencySource``): the
    # harness's receive time less the chunk's end stamp (source, transport and queueing on
    # the Host included), or the server's own processing latency (profiling on).
    latencySource: Literal["ntp_timestamp", "processing_latency"] = "ntp_timestamp"


class PromotionCapacity(Strict):
    """``gates.capacity``: the capacity search (``type: capacity``'s own windows) run in the room
    on the candidate and then on a fresh copy of the running version, one after the other (two
    searches on one GPU at once would measure each other): the same sources, counts, windows
    and criteria on both. The gate: the candidate's highest stable count may be at most
    ``maxCapacityLoss`` below the running version's."""

    initialStreamCount: int = Field(ge=1, le=1024)
    addStreamCount: int = Field(default=1, ge=1, le=256)
    maxStreamCount: int = Field(ge=1, le=1024)
    windowSeconds: int = Field(default=60, ge=5, le=3600)
    maxP95LatencyMs: float = Field(ge=1, le=3_600_000)
    minSuccessRate: float = Field(default=1.0, ge=0.01, le=1)
    chunkDurationSeconds: int = Field(default=2, ge=1, le=60)


class PromotionGates(Strict):
    """What a candidate must measure up to against the running version. ``maxP95Regression``:
    how much slower its p95 chunk latency may be (``10%``), beyond noise (judged over both
    sides' per-chunk latencies); ``maxCapacityLoss``: how many fewer live streams it may hold
    (with ``capacity``); ``maxGpuMemoryGrowthMiB``: what it may leave allocated on its
    GPUs after its cleanup. Dropped chunks may not exceed the running version's, and every
    stream's answers must be its own."""

    canary: PromotionCanary = Field(default_factory=PromotionCanary)
    capacity: PromotionCapacity | None = None  # unset: capacity is not a gate
    maxP95Regression: Annotated[str, Field(max_length=8), checked(_percent_problem)] = "10%"
    maxCapacityLoss: int = Field(default=0, ge=0, le=1024)  # streams, with ``capacity``
    maxGpuMemoryGrowthMiB: int = Field(default=512, ge=0, le=1_048_576)

    @property
    def p95_regression(self) -> float:
        """``maxP95Regression`` as a fraction (``10%``: 0.1)."""
        return float(self.maxP95Regression.rstrip("%")) / 100


class PromotionSpec(Strict):
    """``spec.promotion``: a new image, model or environment reaches this Deployment only
    once a qualification run on its Host measured it against the running version
    (``baseline: sideBySide``: the same load on both, in the same window; ``lastAccepted``:
    the running version's own numbers from the qualification that promoted it) and every
    gate passed; a rejected candidate never touches the running service."""

    candidate: PromotionRoom
    # sideBySide: the running version measured now, beside the candidate; lastAccepted: its
    # numbers read from the run that promoted it (same Host, GPU model and load), measured
    # side by side when there is none.
    baseline: Literal["sideBySide", "lastAccepted"] = "sideBySide"
    gates: PromotionGates = Field(default_factory=PromotionGates)
    budgetSeconds: int = Field(default=900, ge=120, le=86400)  # the qualification run's
    cleanupSeconds: int = Field(default=120, ge=10, le=3600)
    # After a promotion, how long the promoted service is watched: a container that exits or
    # is restarted in that time is replaced by the version it replaced (0: not watched).
    bakeSeconds: int = Field(default=0, ge=0, le=7 * 86400)


class DeploymentSpec(Strict):
    host: Name
    profile: Literal["standard", "perf", "exploration"] = "standard"
    image: Annotated[str, Field(min_length=1, max_length=500, pattern=IMAGE_PATTERN),
                     checked(image_problem)]
    model: ModelSpec
    port: PortSpec
    gpus: list[Gpu] = Field(default_factory=list, max_length=64)
    env: dict[str, EnvValue] = free_text(default_factory=dict)  # a PEM key spans lines
    secrets: list[SecretRef] = Field(default_factory=list)
    # The entry of ``secrets`` whose value is the service's API token (RTVI declares bearer
    # security on every operation): every request we send it carries ``Authorization: Bearer``.
    apiTokenSecret: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    mounts: list[MountSpec] = Field(default_factory=list)
    liveProfile: Literal["default", "no-drop"] = "default"
    eager: EagerJustification | None = None
    unsafeModelConfigReview: str | None = free_text(default=None)
    nonStandard: NonStandard | None = None
    readiness: Readiness = Field(default_factory=Readiness)
    stopGraceSeconds: int = Field(default=30, ge=0, le=3600)
    # ``host``: the container shares the Host's network (RTSP sources on the Host's loopback are
    # reachable; the service listens on port.container itself, so port.host must equal it).
    network: Literal["bridge", "host"] = "bridge"
    # A change of image, model or environment is qualified against the running version
    # before it replaces it (None: it replaces it at once).
    promotion: PromotionSpec | None = None

    _env_names = field_validator("env")(classmethod(lambda cls, v: env_names(v)))


class Deployment(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["Deployment"]
    metadata: Metadata
    spec: DeploymentSpec


# --- StreamSet ------------------------------------------------------------------------------

DESCRIPTION_PATTERN = r"""^[A-Za-z0-9_.\-"' ,]*$"""  # what RTVI accepts in a stream description
COLOUR_PATTERN = r"^(#[0-9A-Fa-f]{6}|[A-Za-z]+)$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"


class SyntheticSource(Strict):
    """A solid colour (palette name or ``#RRGGBB``), optionally with a contrasting border, so a
    caption can be checked against the source it came from."""

    colour: str = Field(pattern=COLOUR_PATTERN)
    border: str | None = Field(default=None, pattern=COLOUR_PATTERN)


class FileSource(Strict):
    """A media file on the publisher's Host, pinned by content: a different file is refused."""

    path: AbsolutePath = reads("media")
    sha256: str = Field(pattern=SHA256_PATTERN)


class SourceSpec(Strict):
    """One live source: an external ``rtsp://`` URL, or one the reconciler publishes."""

    name: Name
    url: Annotated[str, Field(max_length=256),
                   checked(lambda u: url_problem(u, ("rtsp", "rtsps")))] | None = None
    synthetic: SyntheticSource | None = None
    file: FileSource | None = None
    description: str = Field(default="", max_length=256, pattern=DESCRIPTION_PATTERN)


class PublisherSpec(Strict):
    """Where and how published sources run (one labelled container per source)."""

    host: Name | None = None  # default: the Deployment's Host
    width: int = Field(default=320, ge=16, le=3840)
    height: int = Field(default=240, ge=16, le=2160)
    fps: int = Field(default=10, ge=1, le=60)


class VstSpec(Strict):
    """Register sources with VST first; RTVI then receives VST's ``/live/`` URL."""

    url: Annotated[str, Field(max_length=500),
                   checked(lambda u: url_problem(u, ("http", "https")))]
    urlTimeoutSeconds: float = Field(default=60, ge=1, le=3600)


PROMPT_MAX_CHARS = 10240
"""RTVI's ``VlmQuery.prompt`` limit (the service's default ``VLM_PROMPT_MAX_LENGTH``)."""
SEED_MAX = 4294967295
"""RTVI's ``VlmQuery.seed`` range is 1..2^32-1."""


class CaptionSpec(Strict):
    """A live caption session per source (``generate_captions`` with ``stream: true``). Bounds
    are the published OpenAPI's, so a value RTVI would refuse is refused at ``validate``."""

    prompt: str = free_text(min_length=1, max_length=PROMPT_MAX_CHARS)
    chunkDuration: int = Field(default=2, ge=1, le=3600)
    chunkOverlapDuration: int = Field(default=0, ge=0, le=3600)
    maxTokens: int = Field(default=64, ge=1, le=16384)
    temperature: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = Field(default=None, ge=1, le=SEED_MAX)
    maxCaptionAgeSeconds: float = Field(default=30, ge=1, le=86400)


class StreamReadiness(Strict):
    """How fresh frames (and captions) must be, and how long to wait for them."""

    timeoutSeconds: int = Field(default=120, ge=1, le=86400)
    maxFrameAgeSeconds: float = Field(default=15, ge=0.1, le=3600)


class TeardownSpec(Strict):
    """Deleting streams: RTVI drains each one; a batch shares one drain window and deadline."""

    drainTimeoutSeconds: int = Field(default=30, ge=0, le=3600)
    deadlineSeconds: int = Field(default=300, ge=1, le=86400)


class StreamSetSpec(Strict):
    deployment: Name
    vst: VstSpec | None = None
    publisher: PublisherSpec = Field(default_factory=PublisherSpec)
    sources: list[SourceSpec] = Field(min_length=1)
    captions: CaptionSpec | None = None
    readiness: StreamReadiness = Field(default_factory=StreamReadiness)
    teardown: TeardownSpec = Field(default_factory=TeardownSpec)


class StreamSet(Strict):
    apiVersion: Literal["rtvi.reconciler/v1"]
    kind: Literal["StreamSet"]
    metadata: Metadata
    spec: StreamSetSpec


Resource = Host | Deployment | StreamSet
# The loader's table of kinds. Built-ins here; ``reconciler.kinds`` adds any other kind's
# model when it registers it (specs never import the reconciler).
