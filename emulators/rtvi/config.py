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
  ``VLLM_GPU_MEMORY_UTILIZATION`` (0.9), ``VLLM_MAX_NUM_SEQS`` (256),
  ``VLLM_MAX_NUM_BATCHED_TOKENS`` (8192), ``VLLM_ENABLE_PREFIX_CACHING`` (true),
  ``VLLM_DISABLE_MM_PREPROCESSOR_CACHE`` (false) shape vLLM's ``non-default args`` line, and
  ``RTVI_EMU_PREPROCESS_WORKERS`` (4) the ``preprocess workers: N`` line: what a run's evidence
  reads back as the runtime's own settings. ``RTVI_EMU_MAX_MODEL_LEN`` is what the service
  reports whatever a ``VLM_MAX_MODEL_LEN`` asked (a runtime that resolves a request its own
  way).
- ``RTVI_EMU_ACCESS_LOG=0``: silence the one-line-per-request access log.
- ``RTVI_EMU_MAX_STREAMS`` (integer >= 0, default unlimited): capacity. ``streams/add`` entries
  beyond N live (not draining) streams fail ``503 ServerBusy``; ``generate_captions`` answers 503
  when the live streams, or the streams being captioned including the new request's, exceed N.
  Changeable at run time (``POST /emulator/knobs {"max_streams": N|null}``).
- ``RTVI_EMU_LATENCY_MS`` (default 20) and ``RTVI_EMU_LATENCY_PER_STREAM_MS`` (default 0): the
  simulated VLM time per chunk is ``LATENCY_MS + PER_STREAM_MS * live streams``; the emulator really
  sleeps it, and the reported ``vlm_latency_ms`` is the measured time. Run-time: ``latency_ms``,
  ``latency_per_stream_ms``.
- ``RTVI_EMU_BREACH_ABOVE`` (integer, default none), ``RTVI_EMU_BREACH_MS`` (default 0) and
  ``RTVI_EMU_JITTER_MS`` (default 0): above that many live streams each chunk takes
  ``BREACH_MS`` more (a latency breach only above capacity K, for capacity searches), and each
  chunk's time varies by up to ``JITTER_MS`` either way (seeded by ``RTVI_EMU_FAIL_SEED``).
  Run-time: ``breach_above``, ``breach_ms``, ``jitter_ms``.
- ``RTVI_EMU_NO_DECODE=1``: ``streams/add`` registers streams without opening their sources: the
  request is validated, capacity and duplicates are checked, the stream is listed and deletes as
  usual, but no ffmpeg decoder runs, so its captions report no frames. For scale benchmarks (a
  thousand registered streams on two cores); never set by the reconciler's functional tests.
- ``RTVI_EMU_DRAIN_S`` (default 1.0): drain window of a stream delete (see ``streams``). Run-time:
  ``drain_s``.
- ``RTVI_EMU_LEGACY_DELETE=1``: behave as a release before blocking deletes: ``delete-batch``
  refuses ``blocking`` and ``drain_timeout_seconds`` with 422, and a delete without them answers
  at once while its streams drain in the background. Run-time: ``legacy_delete``.
- ``RTVI_EMU_FAIL_RATE`` (0..1, default 0): probability that a ``/v1/`` request other than health
  answers ``500 InternalServerError`` (injected); ``RTVI_EMU_FAIL_SEED`` makes it reproducible.
- ``RTVI_EMU_FILES_DIR``: where uploaded files are kept (default: a fresh temporary folder).
- ``RTVI_EMU_CAPTION_SHAPE`` (``wrapped`` | ``flat``, default ``wrapped``): the shape of caption
  results (SSE events and the non-streaming body of ``generate_captions``). ``wrapped`` is the
  spec's ``VlmCaptionsCompletionResponse`` (chunk fields inside ``chunk_responses[]``, the
  chunk's ``media_info`` beside them): what the real service sends and the VSS harness reads;
  ``flat`` is one ``VlmCaptionResponse`` per event (see ``captions``). Run-time:
  ``caption_shape``.
- ``RTVI_EMU_INGEST_DELAY_S`` (default 0): each decoded frame reaches the chunker this long
  after it arrived (transport and queueing between the source and the service). A chunk's
  ``media_info.end_timestamp`` is still the time its last frame was stamped on arrival, so a
  client measuring as the harness does (receive time - end_timestamp) sees the delay.
  Run-time: ``ingest_delay_s``.
- ``RTVI_EMU_DELETE_IN_USE`` (``end`` | ``refuse``, default ``end``): deleting a stream that a
  caption request holds ends that request (its event stream ends with the usage event and
  ``[DONE]``) and deletes the stream, as the VSS harness's ``single_live_stream`` expects;
  ``refuse`` answers 409 ``ResourceInUse`` instead. Run-time: ``delete_in_use``.
- ``RTVI_EMU_CAPACITY_REFUSAL`` (``503`` | ``in-200``, default ``503``): a ``streams/add``
  whose every entry is refused at capacity answers HTTP 503 ``ServerBusy`` (what the harness
  counts as resource-bound); ``in-200`` reports the refusals inside a 200's ``errors[]``, as an
  add with some entries admitted always does. Run-time: ``capacity_refusal``.
- ``RTVI_EMU_ANSWER_MODE`` (``normal`` | ``gibberish`` | ``repetition`` | ``empty`` |
  ``truncated`` | ``invalid_unicode`` | ``sse_framing`` | ``ungrounded``, default ``normal``): how
  chat completions answer, for model-port quality gates (see ``answers``). Run-time:
  ``answer_mode``.
- EVS pruning: when both ``VIA_EVS_SESSION`` (``true``/``1``/``yes``/``on``) and
  ``VLM_VIDEO_PRUNING_RATE`` (0..1) are set, as the real service needs them, chat completions
  report ``prompt_tokens`` lowered by that rate (pruned video tokens); with either one missing,
  nothing is pruned. ``RTVI_EMU_EVS_IGNORED=1``: a release or model that ignores them (set, yet
  nothing pruned: what pairing must catch).
- ``RTVI_EMU_FILE_HANG_S`` (default 0): a chat request about an uploaded file hangs this long,
  holding the file in use (what the smoke request before a long run must catch). Run-time:
  ``file_hang_s``.
- ``RTVI_EMU_DECODE_DELAY_S`` (default 0): a new stream's decoder starts this long after
  ``streams/add`` (an RTSP source slow to set up, a late first keyframe): its first chunks carry
  no frames. What a measurement window's freshness wait must absorb. Run-time:
  ``decode_delay_s``.
- ``RTVI_EMU_GPU_BOARD`` (URL of ``emulators.gpuboard``): the emulated GPU this service uses:
  ``RTVI_EMU_GPU_MIB`` (default 16000) is allocated on it once the model is loaded, and released
  on shutdown except ``RTVI_EMU_GPU_LEAK_MIB`` (default 0: a leak that outlives the service).
- ``RTVI_EMU_API_TOKEN``: when set, every ``/v1/`` request (health probes included: the spec
  declares bearer security on every operation) without ``Authorization: Bearer <token>`` answers
  ``401 {"code": "Unauthorized", ...}``. A secret: never logged, never shown by the admin API.
- ``RTVI_EMU_FAULTS``: a JSON list of behaviour faults (``admin``: swap or mix two streams'
  captions, drop chunk IDs, error fields in 200 events, empty answers, a stream that refuses to
  delete), active from the start -- for a service a test does not start itself (an
  experiment's fresh service), whose stream IDs are known in advance.
- ``RTVI_EMU_ECHO_ENV``: comma-separated variable names whose values the service prints at
  startup (``config NAME=value``), as real servers that log their configuration do: what a
  client copies from the service's log (readiness errors, an experiment's evidence) must be
  redacted by the client, which tests prove with a canary secret.
- ``RTVI_EMU_RECORD``: a file path; every ``/v1/`` exchange (request body, status, response body,
  each SSE ``data:`` event) is appended to it as one JSON line, and kept in memory for
  ``GET /emulator/exchanges`` (see ``recorder``). Credentials are never recorded.

Emulator-only admin API (never part of the real service; see ``admin``): ``GET /emulator/state``,
``POST /emulator/knobs``, ``POST|DELETE /emulator/faults`` (HTTP faults and caption/delete
faults for canaries), ``GET|DELETE /emulator/exchanges``, ``POST /emulator/crash``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8000
DEFAULT_MODEL_ID = "emulated-vlm"
ESCAPED_PREFIX = "escaped:"
DEFAULT_FATAL_AFTER_S = 0.5
DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_KV_CACHE_DTYPE = "auto"
DEFAULT_LATENCY_MS = 20.0
DEFAULT_DRAIN_S = 1.0
CAPTION_SHAPES = ("wrapped", "flat")
DELETE_IN_USE = ("end", "refuse")
CAPACITY_REFUSALS = ("503", "in-200")
ANSWER_MODES = ("normal", "gibberish", "repetition", "empty", "truncated", "invalid_unicode",
                "sse_framing", "ungrounded")
DEFAULT_CAPTION_SHAPE = "wrapped"
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
    max_streams: int | None = None
    latency_ms: float = DEFAULT_LATENCY_MS
    latency_per_stream_ms: float = 0.0
    drain_s: float = DEFAULT_DRAIN_S
    fail_rate: float = 0.0
    fail_seed: int | None = None
    files_dir: str | None = None
    no_decode: bool = False
    legacy_delete: bool = False
    breach_above: int | None = None
    breach_ms: float = 0.0
    jitter_ms: float = 0.0
    caption_shape: str = DEFAULT_CAPTION_SHAPE
    answer_mode: str = "normal"
    evs_pruning_rate: float | None = None
    gpu_board: str | None = None
    file_hang_s: float = 0.0
    decode_delay_s: float = 0.0
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_prefix_caching: bool = True
    disable_mm_preprocessor_cache: bool = False
    preprocess_workers: int = 4
    ingest_delay_s: float = 0.0
    delete_in_use: str = "end"
    capacity_refusal: str = "503"
    gpu_mib: int = 16000
    gpu_leak_mib: int = 0
    api_token: str | None = field(default=None, repr=False)  # a secret: never in a repr or log
    record_path: str | None = None
    faults: tuple[dict[str, object], ...] = ()
    echo_env: tuple[str, ...] = ()


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
    """A text knob; ``escaped:`` + Python escapes (``\\x1b``) stands for control bytes, which a
    reconciler refuses to put in a container's environment but a real service may still print
    (tests of terminal safety need them)."""
    raw = env.get(name, "").strip()
    if raw.startswith(ESCAPED_PREFIX):
        raw = raw[len(ESCAPED_PREFIX):].encode("ascii", "backslashreplace").decode(
            "unicode_escape")
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
        max_streams=_optional_integer(source, "RTVI_EMU_MAX_STREAMS"),
        latency_ms=_number(source, "RTVI_EMU_LATENCY_MS", DEFAULT_LATENCY_MS),
        latency_per_stream_ms=_number(source, "RTVI_EMU_LATENCY_PER_STREAM_MS", 0.0),
        drain_s=_number(source, "RTVI_EMU_DRAIN_S", DEFAULT_DRAIN_S),
        fail_rate=_fraction(source, "RTVI_EMU_FAIL_RATE"),
        fail_seed=_optional_integer(source, "RTVI_EMU_FAIL_SEED"),
        files_dir=_text(source, "RTVI_EMU_FILES_DIR"),
        no_decode=_flag(source, "RTVI_EMU_NO_DECODE", False),
        legacy_delete=_flag(source, "RTVI_EMU_LEGACY_DELETE", False),
        breach_above=_optional_integer(source, "RTVI_EMU_BREACH_ABOVE"),
        breach_ms=_number(source, "RTVI_EMU_BREACH_MS", 0.0),
        jitter_ms=_number(source, "RTVI_EMU_JITTER_MS", 0.0),
        caption_shape=_choice(source, "RTVI_EMU_CAPTION_SHAPE", CAPTION_SHAPES,
                              DEFAULT_CAPTION_SHAPE),
        answer_mode=_choice(source, "RTVI_EMU_ANSWER_MODE", ANSWER_MODES, "normal"),
        gpu_board=_text(source, "RTVI_EMU_GPU_BOARD"),
        file_hang_s=_number(source, "RTVI_EMU_FILE_HANG_S", 0.0),
        decode_delay_s=_number(source, "RTVI_EMU_DECODE_DELAY_S", 0.0),
        ingest_delay_s=_number(source, "RTVI_EMU_INGEST_DELAY_S", 0.0),
        gpu_memory_utilization=_fraction(source, "VLLM_GPU_MEMORY_UTILIZATION") or 0.9,
        max_num_seqs=_integer(source, "VLLM_MAX_NUM_SEQS", 256, 1, 1_000_000),
        max_num_batched_tokens=_integer(source, "VLLM_MAX_NUM_BATCHED_TOKENS", 8192, 1,
                                        10_000_000),
        enable_prefix_caching=_flag(source, "VLLM_ENABLE_PREFIX_CACHING", True),
        disable_mm_preprocessor_cache=_flag(source, "VLLM_DISABLE_MM_PREPROCESSOR_CACHE", False),
        preprocess_workers=_integer(source, "RTVI_EMU_PREPROCESS_WORKERS", 4, 1, 1024),
        delete_in_use=_choice(source, "RTVI_EMU_DELETE_IN_USE", DELETE_IN_USE, "end"),
        capacity_refusal=_choice(source, "RTVI_EMU_CAPACITY_REFUSAL", CAPACITY_REFUSALS, "503"),
        gpu_mib=int(_number(source, "RTVI_EMU_GPU_MIB", 16000)),
        gpu_leak_mib=int(_number(source, "RTVI_EMU_GPU_LEAK_MIB", 0)),
        evs_pruning_rate=(_fraction(source, "VLM_VIDEO_PRUNING_RATE")
                          if (_text(source, "VIA_EVS_SESSION") or "").lower() in TRUTHY
                          and _text(source, "VLM_VIDEO_PRUNING_RATE")
                          and not _flag(source, "RTVI_EMU_EVS_IGNORED", False) else None),
        api_token=_secret(source, "RTVI_EMU_API_TOKEN"),
        record_path=_text(source, "RTVI_EMU_RECORD"),
        faults=_faults(source, "RTVI_EMU_FAULTS"),
        echo_env=tuple(n.strip() for n in (_text(source, "RTVI_EMU_ECHO_ENV") or "").split(",")
                       if n.strip()),
    )


def _faults(env: Mapping[str, str], name: str) -> tuple[dict[str, object], ...]:
    """A JSON list of behaviour faults, each as ``POST /emulator/faults`` takes it (checked by
    the application at start)."""
    raw = env.get(name, "").strip()
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a JSON list of fault objects") from None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{name} must be a JSON list of fault objects")
    return tuple(value)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {list(choices)}")
    return raw


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """A secret is taken verbatim (no ``escaped:`` decoding) and never echoed in errors."""
    raw = env.get(name, "").strip()
    if raw and not all(0x21 <= ord(c) <= 0x7E for c in raw):
        raise ConfigError(f"{name} must be printable ASCII without spaces")
    return raw or None


def _optional_integer(env: Mapping[str, str], name: str) -> int | None:
    if not env.get(name, "").strip():
        return None
    return _integer(env, name, 0, 0, 2**31 - 1)


def _fraction(env: Mapping[str, str], name: str) -> float:
    value = _number(env, name, 0.0)
    if value > 1:
        raise ConfigError(f"{name} must be in 0..1")
    return value
