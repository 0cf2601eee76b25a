"""The container environment a Deployment gets, computed from its spec alone.

The environment is complete and explicit (rule 8): it is built only from the spec — model
variables, profile and live-profile settings, then the person's ``env`` — and never from the
reconciler's own shell. Secrets are not part of it: their values join only at container
creation (``controllers.secrets``), so this function's output is safe to print, hash and store.
"""

from __future__ import annotations

import unicodedata

from specs.models import DeploymentSpec

PRESETS: dict[str, tuple[str, str]] = {
    "cr3-nano-reasoner-fp8": (
        "cosmos-reason3",
        "ngc:nim/nvidia/cosmos3-nano-reasoner:modelopt-fp8-final_format_fix",
    ),
    "cr3-nano-reasoner-nvfp4": (
        "cosmos-reason3",
        "ngc:nim/nvidia/cosmos3-nano-reasoner:modelopt-nvfp4-full-quantize-final_format_fix",
    ),
}
NVFP4_PRESET = "cr3-nano-reasoner-nvfp4"
NVFP4_MIN_COMPUTE_CAPABILITY = (10, 0)

# rule 7: what `profile: perf` forces.
PERF_SETTINGS = {
    "VLLM_ENABLE_PREFIX_CACHING": "false",
    "VLLM_DISABLE_MM_PREPROCESSOR_CACHE": "true",
    "RTVI_EMPTY_CUDA_CACHE_ON_RESULT": "false",
}
# rule 9: live no-drop settings.
NO_DROP_SETTINGS = {
    "RTVI_RTSP_LATENCY": "300",
    "RTVI_RTPJITTERBUFFER_DROP_ON_LATENCY": "false",
    "RTVI_RTPJITTERBUFFER_FASTSTART_MIN_PACKETS": "2",
    "RTVI_DISABLE_LIVESTREAM_PREVIEW": "true",
    "RTVI_ENABLE_LIVE_TIMESTAMP_FILTER": "false",
}
MODEL_VARIABLES = ("VLM_MODEL_TO_USE", "MODEL_PATH", "MODEL_IMPLEMENTATION_PATH")
# Whitespace controls a multi-line value (a PEM key, a prompt) legitimately carries. Every other
# control character is refused: NUL cannot be passed at all (the kernel's environment is
# NUL-terminated, so runc refuses to start the container), and the rest are terminal escapes
# and truncation tricks with no business in a container's environment.
ALLOWED_CONTROLS = frozenset("\t\n\r")
CONTROL_CATEGORY = "Cc"


def model_identity(spec: DeploymentSpec) -> tuple[str | None, str | None]:
    """(VLM_MODEL_TO_USE, MODEL_PATH) after applying a preset."""
    if spec.model.preset is not None:
        return PRESETS[spec.model.preset]
    return spec.model.use, spec.model.path


def effective_env(spec: DeploymentSpec) -> dict[str, str]:
    """The full non-secret environment of the container, in a stable order."""
    env: dict[str, str] = {}
    use, path = model_identity(spec)
    if use is not None:
        env["VLM_MODEL_TO_USE"] = use
    if path is not None:
        env["MODEL_PATH"] = path
    if spec.model.implementationPath is not None:
        env["MODEL_IMPLEMENTATION_PATH"] = spec.model.implementationPath
    if spec.profile == "perf":
        env.update(PERF_SETTINGS)
    if spec.liveProfile == "no-drop":
        env.update(NO_DROP_SETTINGS)
    env.update(spec.env)
    return dict(sorted(env.items()))


def control_characters(value: str) -> list[str]:
    """The refused control characters in ``value``, named (``NUL``, ``U+001B``), in order of
    code point and without repeats. Names only: a message must never quote the value itself."""
    found = {ch for ch in value
             if unicodedata.category(ch) == CONTROL_CATEGORY and ch not in ALLOWED_CONTROLS}
    return ["NUL" if ch == "\0" else f"U+{ord(ch):04X}" for ch in sorted(found)]


def is_true(value: str | None) -> bool:
    """RT-VLM reads booleans case-insensitively; so do we."""
    return value is not None and value.strip().lower() in ("true", "1", "yes")
