"""Log lines of the emulated service, in the shapes the real container prints.

Why exact shapes: the reconciler parses runtime facts (model, quantization, eager mode, max length,
KV-cache dtype, CUDA-graph capture, startup complete, fatal markers) from the real RT-VLM
container's logs, whose engine is vLLM behind uvicorn. The emulator prints the same shapes so the
same parser is exercised in CI.

Why a sink with a lock: request threads (access log) and the lifecycle thread write concurrently;
each line goes out in one ``write`` plus ``flush`` so lines never interleave or sit in a buffer.

Secrets: nothing here reads the environment. The only environment-derived texts printed are the
model path (with any URL user-info masked), the model name and the fatal marker, all of which the
vLLM shapes require.
"""

from __future__ import annotations

import re
import threading
import time
from typing import TextIO

from emulators.rtvi.config import Settings

VLLM_VERSION = "v0.10.1"
VLLM_TIME_FORMAT = "%m-%d %H:%M:%S"
CUDA_GRAPH_COUNT = 67
UVICORN_PREFIX = "INFO:     "
STARTUP_COMPLETE_LINE = f"{UVICORN_PREFIX}Application startup complete."
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
# Realistic vLLM error texts per known fatal marker. A template is used only when it holds the
# configured marker verbatim; otherwise the marker is wrapped in a generic RuntimeError line.
FATAL_TEMPLATES = (
    "[gpu_model_runner.py:2300] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Including "
    "non-PyTorch memory, this process has 78.12 GiB memory in use.",
    "[async_llm.py:416] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
    "issue. See stack trace (above) for the root cause.",
    "[core.py:700] RuntimeError: FMHA kernels are not found for this GPU (compute capability "
    "not supported by the attention backend).",
)
GENERIC_FATAL_TEMPLATE = "[core.py:700] RuntimeError: {marker}"


def vllm_time(now: float | None = None) -> str:
    """vLLM's ``MM-DD HH:MM:SS`` timestamp in local time."""
    return time.strftime(VLLM_TIME_FORMAT, time.localtime(now))


def mask_userinfo(text: str) -> str:
    """Hide ``user:token@`` in URLs (a ``git:https://user:token@host/...`` model path)."""
    return _USERINFO.sub("***@", text)


def quantization_of(model_path: str | None) -> str:
    lowered = (model_path or "").lower()
    if "fp8" in lowered:
        return "fp8"
    if "nvfp4" in lowered:
        return "nvfp4"
    return "None"


def engine_init_line(settings: Settings, now: float | None = None) -> str:
    """The vLLM V1 engine config line; the model falls back to the served model ID."""
    model = mask_userinfo(settings.model_path or settings.model_id)
    return (
        f"INFO {vllm_time(now)} [core.py:69] Initializing a V1 LLM engine ({VLLM_VERSION}) with "
        f"config: model='{model}', speculative_config=None, tokenizer='{model}', "
        f"trust_remote_code={settings.trust_remote_code}, dtype=torch.bfloat16, "
        f"max_seq_len={settings.max_model_len}, "
        f"quantization={quantization_of(settings.model_path)}, "
        f"enforce_eager={settings.enforce_eager}, kv_cache_dtype={settings.kv_cache_dtype}, "
        f"device_config=cuda, seed=0"
    )


def non_default_args_line(settings: Settings, now: float | None = None) -> str:
    """vLLM's ``non-default args`` line: what the engine was started with beyond its defaults
    (memory utilisation, scheduler limits, caches), as the service resolved them."""
    model = mask_userinfo(settings.model_path or settings.model_id)
    args = {"model": model, "max_model_len": settings.max_model_len,
            "gpu_memory_utilization": settings.gpu_memory_utilization,
            "max_num_seqs": settings.max_num_seqs,
            "max_num_batched_tokens": settings.max_num_batched_tokens,
            "enable_prefix_caching": settings.enable_prefix_caching,
            "mm_processor_cache_gb": 0 if settings.disable_mm_preprocessor_cache else 4}
    return f"INFO {vllm_time(now)} [utils.py:326] non-default args: {args!r}"


def preprocess_workers_line(settings: Settings, now: float | None = None) -> str:
    """The emulator's RT-VLM line for its preprocess worker count (the real service's shape is
    not published: the reconciler reads ``preprocess workers: N``)."""
    return (f"INFO {vllm_time(now)} [rtvi_vlm_server.py:210] preprocess workers: "
            f"{settings.preprocess_workers}")


def cuda_graphs_line(now: float | None = None) -> str:
    return (
        f"INFO {vllm_time(now)} [gpu_model_runner.py:2000] Capturing CUDA graphs "
        f"(mixed prefill-decode, PIECEWISE): 100%|##########| {CUDA_GRAPH_COUNT}/{CUDA_GRAPH_COUNT}"
    )


def fatal_lines(marker: str, now: float | None = None) -> list[str]:
    """Two ERROR lines, the second holding ``marker`` verbatim (on one line)."""
    one_line = " ".join(marker.split())
    detail = next(
        (template for template in FATAL_TEMPLATES if one_line in template),
        GENERIC_FATAL_TEMPLATE.format(marker=one_line),
    )
    stamp = vllm_time(now)
    return [
        f"ERROR {stamp} [core.py:708] EngineCore failed to start.",
        f"ERROR {stamp} {detail}",
    ]


def server_process_line(pid: int) -> str:
    return f"{UVICORN_PREFIX}Started server process [{pid}]"


def running_line(host: str, port: int) -> str:
    return f"{UVICORN_PREFIX}Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"


def access_line(client: str, method: str, path: str, status: int, reason: str) -> str:
    """uvicorn's access-log shape; the path is logged without its query string."""
    return f'{UVICORN_PREFIX}{client} - "{method} {path} HTTP/1.1" {status} {reason}'


class LogSink:
    """Writes whole lines to stdout/stderr under one lock, flushing each."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out = out
        self._err = err
        self._lock = threading.Lock()

    def info(self, line: str) -> None:
        self._write(self._out, line)

    def error(self, line: str) -> None:
        self._write(self._err, line)

    def _write(self, stream: TextIO, line: str) -> None:
        with self._lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed pipe must not kill a request thread
