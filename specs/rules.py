"""Deployment rules from ``shared/contracts/rules.md`` that need no observation.

Each check is a pure function of one Deployment and returns ``Finding``s with the field path
they concern; ``specs.validate`` turns paths into ``file:line:col``. Rules that need the Host's
observed facts (GPU presence and capability, image presence) are in ``specs.hostrules``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specs.environment import (
    MODEL_VARIABLES,
    NO_DROP_SETTINGS,
    PERF_SETTINGS,
    PRESETS,
    effective_env,
    is_true,
    model_identity,
)
from specs.errors import Severity
from specs.loader import PathKey
from specs.models import (
    Deployment,
    DeploymentSpec,
    MountSpec,
    PromotionSpec,
    normal_path_problem,
)

DIGEST_RE = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
NGC_RE = re.compile(r"^ngc:[^/\s:]+/[^/\s:]+/[^/\s:]+:[^\s/]+$")
GIT_RE = re.compile(r"^git:https://\S+$")
HF_TOKEN_RE = re.compile(r"hf_[A-Za-z0-9]{16,}")
URL_USERINFO_RE = re.compile(r"://[^/@\s]+@")
SECRET_NAME_RE = re.compile(r"(TOKEN|API_KEY|SECRET|PASSWORD|PASSWD|PRIVATE_KEY)$")
EVS_VARIABLES = ("VLM_VIDEO_PRUNING_RATE", "VLLM_EVS_SIMILARITY_THRESHOLD", "VIA_EVS_TOKEN_BUDGET")
EVS_STANDARD = {
    "VLM_VIDEO_PRUNING_RATE": 0.5,
    "VLLM_EVS_SIMILARITY_THRESHOLD": 0.4,
    "VIA_EVS_TOKEN_BUDGET": 1.0,
}
EVS_REFUSED_ARCHITECTURES = ("NemotronH_Nano_Omni_Reasoning_V3",)
# Variables whose values rules 2-9 judge: passing one as a secret would hide it from them.
RULED_VARIABLES = frozenset({
    *MODEL_VARIABLES, *PERF_SETTINGS, *NO_DROP_SETTINGS, *EVS_VARIABLES, "VIA_EVS_SESSION",
    "VLLM_IGNORE_EOS", "VLLM_ENFORCE_EAGER", "VLM_TRUST_REMOTE_CODE", "RTVI_MODEL_PATH_ALLOWLIST",
    "RTVI_ALLOW_UNSAFE_MODEL_CONFIG"})

R1 = "Deployment rule 1: image pinned by digest"
R2 = "Deployment rule 2: MODEL_PATH forms"
R3 = "Deployment rule 3: presets"
R4 = "Deployment rule 4: custom model implementation"
R5 = "Deployment rule 5: remote code and unsafe config"
R6 = "Deployment rule 6: eager mode gate"
R7 = "Deployment rule 7: perf profile settings"
R8 = "Deployment rule 8: EVS settings"
R9 = "Deployment rule 9: live no-drop settings"
R10 = "Deployment rule 10: exclusive GPUs"
R12 = "Deployment rule 12: secrets are references"
R_MODEL_VARS = "model variables come from spec.model"
R_NETWORK = "host networking: the service listens on its published port"
R_SECRET_VALUE = "secret values: a regular file or variable, no control characters"
R_PORT_FREE = "Deployment port: the host port is free"
R_MOUNTS = "Deployment mounts: one mount per target"
R_PROMOTION = "Deployment promotion: the candidate's room is its own"


@dataclass(frozen=True)
class Finding:
    """A rule's verdict on one field of one resource."""

    path: PathKey
    message: str
    rule: str
    severity: Severity = "error"


Check = Callable[[DeploymentSpec], Iterator[Finding]]


def check_deployment(deployment: Deployment) -> list[Finding]:
    """Run every observation-free Deployment rule; paths are relative to the document root."""
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(
            Finding(("spec", *f.path), f.message, f.rule, f.severity)
            for f in check(deployment.spec)
        )
    return findings


def _env_path(spec: DeploymentSpec, key: str, fallback: PathKey) -> PathKey:
    """Point at the env entry when the person wrote it, else at the field that implied it."""
    return ("env", key) if key in spec.env else fallback


def check_image(spec: DeploymentSpec) -> Iterator[Finding]:
    if spec.profile != "exploration" and not DIGEST_RE.fullmatch(spec.image):
        yield Finding(("image",), f"{spec.image!r} is not pinned by digest "
                      "(want name@sha256:<64 lowercase hex>); only profile exploration may use "
                      "a tag", R1)


def check_model(spec: DeploymentSpec) -> Iterator[Finding]:
    model = spec.model
    for key in MODEL_VARIABLES:
        if key in spec.env:
            yield Finding(("env", key), f"set {key} through spec.model, not env", R_MODEL_VARS)
    if model.preset is not None:
        preset_use, preset_path = PRESETS[model.preset]
        if model.use not in (None, preset_use) or model.path not in (None, preset_path):
            yield Finding(("model", "preset"), f"preset {model.preset} means use={preset_use} "
                          f"path={preset_path}; remove the conflicting use/path", R3)
        return
    use, path = model_identity(spec)
    if use is None:
        yield Finding(("model",), "set model.preset or model.use (VLM_MODEL_TO_USE)", R3)
    if path is None and use != "custom":
        yield Finding(("model",), "set model.path (MODEL_PATH)", R2)
    if path is not None:
        yield from _check_model_path(spec, path)
    if use == "custom":
        yield from _check_custom_model(spec)


def _check_custom_model(spec: DeploymentSpec) -> Iterator[Finding]:
    """VLM_MODEL_TO_USE=custom: its implementation must be named, inside the container."""
    implementation = spec.model.implementationPath
    if implementation is None:
        yield Finding(("model",), "VLM_MODEL_TO_USE=custom needs model.implementationPath "
                      "(MODEL_IMPLEMENTATION_PATH)", R4)
    elif normal_path_problem(implementation) is not None:
        yield Finding(("model", "implementationPath"), f"a path inside the container: "
                      f"{normal_path_problem(implementation)}", R4)


def _check_model_path(spec: DeploymentSpec, path: str) -> Iterator[Finding]:
    where: PathKey = ("model", "path")
    leaks = HF_TOKEN_RE.search(path) or URL_USERINFO_RE.search(path)
    if "HF_TOKEN" in path or "$" in path or leaks:
        yield Finding(where, "MODEL_PATH must not carry credentials or variable expansions; "
                      "pass HF_TOKEN as a secret reference", R12)
        return
    if path.startswith("git:"):
        if not GIT_RE.fullmatch(path):
            yield Finding(where, "git: model paths must be git:https://…", R2)
        elif spec.profile != "exploration":
            yield Finding(where, "git: model sources are not revision-pinned; allowed only with "
                          "profile: exploration (use a mounted, revision-pinned snapshot)", R2)
    elif path.startswith("/") and normal_path_problem(path) is not None:
        # Compared by prefix with the mounts below: /models/../etc is not under /models.
        yield Finding(where, f"MODEL_PATH {normal_path_problem(path)}", R2)
    elif path.startswith("/"):
        mount = covering_mount(spec, path)
        if mount is None:
            yield Finding(where, f"absolute MODEL_PATH {path} must be bind-mounted read-only: "
                          "add a spec.mounts entry whose target contains it", R2)
        elif not mount.readOnly:
            index = spec.mounts.index(mount)
            yield Finding(("mounts", index, "readOnly"), f"the mount holding MODEL_PATH {path} "
                          "must be read-only", R2)
    elif not NGC_RE.fullmatch(path):
        yield Finding(where, f"{path!r} is not ngc:<org>/<team>/<model>:<version>, an absolute "
                      "mounted path, or git:https://…", R2)


def covering_mount(spec: DeploymentSpec, path: str) -> MountSpec | None:
    """The declared mount whose target contains ``path`` (deepest wins), if any."""
    best: MountSpec | None = None
    for mount in spec.mounts:
        target = mount.target.rstrip("/") or "/"
        if (path == target or path.startswith(target.rstrip("/") + "/")) and (
            best is None or len(target) > len(best.target)
        ):
            best = mount
    return best


def check_remote_code(spec: DeploymentSpec) -> Iterator[Finding]:
    env = effective_env(spec)
    if is_true(env.get("VLM_TRUST_REMOTE_CODE")):
        _, path = model_identity(spec)
        allow = [a.strip() for a in env.get("RTVI_MODEL_PATH_ALLOWLIST", "").split(",")]
        if path is None or path not in allow:
            yield Finding(("env", "VLM_TRUST_REMOTE_CODE"), "trusting remote code needs an exact "
                          f"RTVI_MODEL_PATH_ALLOWLIST entry for MODEL_PATH {path!r}", R5)
    if is_true(env.get("RTVI_ALLOW_UNSAFE_MODEL_CONFIG")) and not (
        spec.unsafeModelConfigReview or ""
    ).strip():
        yield Finding(("env", "RTVI_ALLOW_UNSAFE_MODEL_CONFIG"), "needs a written review note in "
                      "spec.unsafeModelConfigReview", R5)


def check_eager(spec: DeploymentSpec) -> Iterator[Finding]:
    if is_true(spec.env.get("VLLM_ENFORCE_EAGER")) and spec.eager is None:
        yield Finding(("env", "VLLM_ENFORCE_EAGER"), "eager mode is off by default; turning it "
                      "on needs spec.eager with blocker, performanceImpact and removalCondition",
                      R6)
    if spec.eager is not None and not is_true(spec.env.get("VLLM_ENFORCE_EAGER")):
        yield Finding(("eager",), "spec.eager is set but VLLM_ENFORCE_EAGER is not true",
                      R6, "warning")


def check_perf(spec: DeploymentSpec) -> Iterator[Finding]:
    if spec.profile != "perf":
        return
    for key, want in PERF_SETTINGS.items():
        got = spec.env.get(key)
        if got is not None and got.lower() != want:
            if spec.nonStandard is None:
                yield Finding(("env", key), f"profile perf requires {key}={want}; mark the spec "
                              "spec.nonStandard with a reason to deviate", R7)
            else:
                yield Finding(("env", key), f"non-standard: {key}={got} (perf wants {want})",
                              R7, "warning")


def check_evs(spec: DeploymentSpec) -> Iterator[Finding]:
    env = spec.env
    if not is_true(env.get("VIA_EVS_SESSION")):
        for key in EVS_VARIABLES:
            if key in env:
                yield Finding(("env", key), f"{key} is an EVS setting but VIA_EVS_SESSION is not "
                              "true; a non-EVS deployment passes no EVS variables", R8)
        return
    where: PathKey = ("env", "VIA_EVS_SESSION")
    if spec.model.architecture in EVS_REFUSED_ARCHITECTURES:
        yield Finding(("model", "architecture"), f"EVS sessions are refused on architecture "
                      f"{spec.model.architecture}", R8)
    rate = env.get("VLM_VIDEO_PRUNING_RATE")
    if rate is None:
        yield Finding(where, "VIA_EVS_SESSION=true requires VLM_VIDEO_PRUNING_RATE "
                      "(standard 0.5, 0 < rate < 1)", R8)
    else:
        value = _number(rate)
        if value is None or not 0 < value < 1:
            yield Finding(("env", "VLM_VIDEO_PRUNING_RATE"), f"must be a number with 0 < rate < 1,"
                          f" got {rate!r}", R8)
    if not is_true(env.get("VLLM_IGNORE_EOS")):
        yield Finding(_env_path(spec, "VLLM_IGNORE_EOS", where), "VIA_EVS_SESSION=true requires "
                      "VLLM_IGNORE_EOS=true", R8)
    for key, standard in EVS_STANDARD.items():
        got = env.get(key)
        value = _number(got) if got is not None else None
        if got is not None and value is not None and value != standard:
            severity: Severity = "warning"
            yield Finding(("env", key), f"deviates from the standard {key}={standard:g} "
                          f"(got {got}); flagged", R8, severity)


def check_no_drop(spec: DeploymentSpec) -> Iterator[Finding]:
    if spec.liveProfile != "no-drop":
        return
    for key, want in NO_DROP_SETTINGS.items():
        got = spec.env.get(key)
        if got is not None and got.lower() != want and spec.nonStandard is None:
            yield Finding(("env", key), f"liveProfile no-drop requires {key}={want}; mark "
                          "spec.nonStandard with a reason to deviate", R9)


def check_secrets(spec: DeploymentSpec) -> Iterator[Finding]:
    seen: set[str] = set()
    for i, ref in enumerate(spec.secrets):
        if (ref.fromEnv is None) == (ref.fromFile is None):
            yield Finding(("secrets", i), "give exactly one of fromEnv or fromFile", R12)
        if ref.name in seen:
            yield Finding(("secrets", i, "name"), f"secret {ref.name} is listed twice", R12)
        seen.add(ref.name)
        if ref.name in spec.env:
            yield Finding(("env", ref.name), f"{ref.name} is a secret reference; it must not "
                          "also be a plain env value", R12)
        if ref.name in RULED_VARIABLES:
            yield Finding(("secrets", i, "name"), f"{ref.name} is checked by the Deployment "
                          "rules, so its value must be visible in the spec; set it in spec.env "
                          "or spec.model, not as a secret", R12)
    if spec.apiTokenSecret is not None and spec.apiTokenSecret not in seen:
        yield Finding(("apiTokenSecret",), f"names no entry of spec.secrets "
                      f"({', '.join(sorted(seen)) or 'there are none'}); the token is a secret "
                      "reference like any other", R12)
    for key in spec.env:
        if SECRET_NAME_RE.search(key) and key not in seen:
            yield Finding(("env", key), f"{key} looks like a secret; pass it with spec.secrets "
                          "(fromEnv or fromFile), never as a plain value", R12)


def check_gpus(spec: DeploymentSpec) -> Iterator[Finding]:
    seen: set[str] = set()
    for i, gpu in enumerate(spec.gpus):
        key = str(gpu)
        if isinstance(gpu, str) and not gpu.startswith(("GPU-", "MIG-")):
            yield Finding(("gpus", i), f"{gpu!r} is neither an index nor a GPU/MIG UUID", R10)
        if key in seen:
            yield Finding(("gpus", i), f"GPU {key} is listed twice", R10)
        seen.add(key)


def check_network(spec: DeploymentSpec) -> Iterator[Finding]:
    if spec.network == "host" and spec.port.host != spec.port.container:
        yield Finding(("port", "host"), f"with network: host there is no port mapping; port.host "
                      f"({spec.port.host}) must equal port.container ({spec.port.container})",
                      R_NETWORK)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check_mounts(spec: DeploymentSpec) -> Iterator[Finding]:
    """Two mounts on one target: Docker refuses the container ("Duplicate mount point")."""
    seen: dict[str, int] = {}
    for i, mount in enumerate(spec.mounts):
        first = seen.setdefault(mount.target, i)
        if first != i:
            yield Finding(("mounts", i, "target"), f"{mount.target} is also mounts[{first}]'s "
                          "target: Docker refuses a second mount on it", R_MOUNTS)


def check_promotion(spec: DeploymentSpec) -> Iterator[Finding]:
    """The candidate is measured beside the running service: never on its port or its GPUs."""
    promotion = spec.promotion
    if promotion is None:
        return
    room = promotion.candidate
    if room.port == spec.port.host:
        yield Finding(("promotion", "candidate", "port"), f"port {room.port} is the running "
                      "service's own (port.host): the candidate needs another", R_PROMOTION)
    held = {str(g) for g in spec.gpus}
    for i, gpu in enumerate(room.gpus):
        if str(gpu) in held:
            yield Finding(("promotion", "candidate", "gpus", i), f"GPU {gpu} is the running "
                          "service's (spec.gpus): the candidate is measured beside it, on GPUs "
                          "of its own", R_PROMOTION)
    if spec.network == "host" and not room.env:
        yield Finding(("promotion", "candidate", "env"), "a service on the Host's network reads "
                      "its port from its environment: say which variables give the candidate "
                      f"port {room.port} (e.g. the one that gives port.host now)", R_PROMOTION)
    yield from _capacity_gate(promotion)
    least = MIN_QUALIFY_S + (2 * cap.windowSeconds if (cap := promotion.gates.capacity) else 0)
    if promotion.budgetSeconds < promotion.cleanupSeconds + least:
        yield Finding(("promotion", "budgetSeconds"), f"{promotion.budgetSeconds}s cannot hold "
                      f"the {promotion.cleanupSeconds}s kept for cleanup plus a qualification "
                      f"of at least {least}s" + (" (a capacity window on each side included)"
                                                 if cap else ""), R_PROMOTION)


def _capacity_gate(promotion: PromotionSpec) -> Iterator[Finding]:
    """The capacity gate's search must be one that can run, and its limit needs the search."""
    gates = promotion.gates
    cap = gates.capacity
    if cap is None:
        if "maxCapacityLoss" in gates.model_fields_set:
            yield Finding(("promotion", "gates", "maxCapacityLoss"), "capacity is judged only "
                          "by a capacity search: name it in gates.capacity (the counts, the "
                          "window and the latency ceiling)", R_PROMOTION)
        return
    at = ("promotion", "gates", "capacity")
    if cap.initialStreamCount > cap.maxStreamCount:
        yield Finding((*at, "initialStreamCount"), f"{cap.initialStreamCount} is above "
                      f"maxStreamCount {cap.maxStreamCount}", R_PROMOTION)
    if cap.chunkDurationSeconds > cap.windowSeconds:
        yield Finding((*at, "chunkDurationSeconds"), f"a chunk of {cap.chunkDurationSeconds}s "
                      f"is longer than the {cap.windowSeconds}s window that judges it: no chunk "
                      "would complete in a window", R_PROMOTION)


MIN_QUALIFY_S = 60


CHECKS: tuple[Check, ...] = (
    check_image,
    check_mounts,
    check_model,
    check_remote_code,
    check_eager,
    check_perf,
    check_evs,
    check_no_drop,
    check_secrets,
    check_gpus,
    check_network,
    check_promotion,
)
