"""Environment knobs of the RTVI emulator, parsed once at start-up.

Why one frozen settings object: every behaviour the tests (and the reconciler's own test suites)
steer is visible in one place, and a malformed knob stops the process before it listens instead of
surfacing as a strange answer later. Error messages name the knob but never echo its value, because
the same environment carries secrets (NGC_API_KEY, HF_TOKEN) that must never reach the logs.

Knobs:
- ``RTVI_EMU_HOST`` (default ``0.0.0.0``) and ``RTVI_EMU_PORT`` (default 8000): listening address.
- ``RTVI_EMU_STARTUP_DELAY_S`` (float, default 0): simulated model-loading time; ready, startup and
  models answer 503 until it has passed.
- ``RTVI_EMU_MODEL_ID``: the model ID listed by ``/v1/models``; falls back to ``VLM_MODEL_TO_USE``,
  then to ``emulated-vlm``.
- ``RTVI_EMU_NO_MODELS=1``: ``/v1/models`` lists no model (a server that is up but serves nothing).
- ``RTVI_EMU_FATAL``: a fatal marker text (``CUDA out of memory``, ``EngineDeadError``, ...). After
  ``RTVI_EMU_FATAL_AFTER_S`` (default 0.5) a realistic error line holding it goes to stderr and the
  process exits 1; with ``RTVI_EMU_FATAL_EXIT=0`` it keeps serving but never becomes ready.
- ``RTVI_EMU_MAX_MODEL_LEN`` (default 32768), ``RTVI_EMU_KV_CACHE_DTYPE`` (default ``auto``),
  ``MODEL_PATH``, ``VLM_TRUST_REMOTE_CODE``, ``VLLM_ENFORCE_EAGER``: shape the vLLM start-up line.
- ``RTVI_EMU_ACCESS_LOG=0``: silence the one-line-per-request access log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8000
DEFAULT_MODEL_ID = "emulated-vlm"
DEFAULT_FATAL_AFTER_S = 0.5
DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_KV_CACHE_DTYPE = "auto"
TRUTHY = frozenset({"1", "true", "yes", "on"})
FALSY = frozenset({"0", "false", "no", "off"})


class ConfigError(ValueError):
    """A knob holds a value of the wrong type; the message names the knob, never the value."""


@dataclass(frozen=True)
class Settings:
    """All knobs, typed. Build with :func:`load_settings`."""

    host: str
    port: int
    startup_delay_s: float
    model_id: str
    no_models: bool
    fatal_marker: str | None
    fatal_after_s: float
    fatal_exit: bool
    model_path: str | None
    trust_remote_code: bool
    enforce_eager: bool
    max_model_len: int
    kv_cache_dtype: str
    access_log: bool


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in TRUTHY:
        return True
    if raw in FALSY:
        return False
    raise ConfigError(f"{name} must be one of {sorted(TRUTHY | FALSY)}")


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds") from None
    if value < 0 or value != value:  # negative or NaN
        raise ConfigError(f"{name} must be >= 0")
    return value


def _integer(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be in {low}..{high}")
    return value


def _text(env: Mapping[str, str], name: str) -> str | None:
    raw = env.get(name, "").strip()
    return raw or None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Parse the knobs from ``env`` (default: the process environment)."""
    source = os.environ if env is None else env
    model_id = _text(source, "RTVI_EMU_MODEL_ID") or _text(source, "VLM_MODEL_TO_USE")
    return Settings(
        host=_text(source, "RTVI_EMU_HOST") or DEFAULT_HOST,
        port=_integer(source, "RTVI_EMU_PORT", DEFAULT_PORT, 0, 65535),
        startup_delay_s=_number(source, "RTVI_EMU_STARTUP_DELAY_S", 0.0),
        model_id=model_id or DEFAULT_MODEL_ID,
        no_models=_flag(source, "RTVI_EMU_NO_MODELS", False),
        fatal_marker=_text(source, "RTVI_EMU_FATAL"),
        fatal_after_s=_number(source, "RTVI_EMU_FATAL_AFTER_S", DEFAULT_FATAL_AFTER_S),
        fatal_exit=_flag(source, "RTVI_EMU_FATAL_EXIT", True),
        model_path=_text(source, "MODEL_PATH"),
        trust_remote_code=_flag(source, "VLM_TRUST_REMOTE_CODE", False),
        enforce_eager=_flag(source, "VLLM_ENFORCE_EAGER", False),
        max_model_len=_integer(
            source, "RTVI_EMU_MAX_MODEL_LEN", DEFAULT_MAX_MODEL_LEN, 1, 2**31 - 1
        ),
        kv_cache_dtype=_text(source, "RTVI_EMU_KV_CACHE_DTYPE") or DEFAULT_KV_CACHE_DTYPE,
        access_log=_flag(source, "RTVI_EMU_ACCESS_LOG", True),
    )
