"""Runtime facts and fatal markers read from an RT-VLM container's logs (rule 11).

vLLM prints its engine config once at start-up (``... with config: model='…', dtype=…,
max_seq_len=…, quantization=…, enforce_eager=…, kv_cache_dtype=…``) and "Capturing CUDA graphs"
when graphs are used. We record what we find; absent facts are simply absent.
"""

from __future__ import annotations

import re

FATAL_MARKERS = ("EngineDeadError", "CUDA out of memory", "FMHA kernels are not found")
_CONFIG_FIELDS = ("dtype", "max_seq_len", "max_model_len", "quantization", "enforce_eager",
                  "kv_cache_dtype")
_FIELD_RE = re.compile(r"\b(" + "|".join(_CONFIG_FIELDS) + r")=('[^']*'|[^,\s]+)")


def fatal_marker(line: str) -> str | None:
    """The fatal marker a log line carries, if any."""
    for marker in FATAL_MARKERS:
        if marker in line:
            return marker
    return None


def update_facts(facts: dict[str, str], line: str) -> None:
    """Fold one log line into ``facts`` (precision, max_model_len, kv_cache_dtype, mode)."""
    if "Capturing CUDA graphs" in line:
        facts["mode"] = "cuda-graph"
        return
    if "with config:" not in line:
        return
    found = {key: raw.strip("'") for key, raw in _FIELD_RE.findall(line)}
    quantization = found.get("quantization", "None")
    precision = quantization if quantization != "None" else found.get("dtype")
    if precision:
        facts["precision"] = precision
    length = found.get("max_model_len") or found.get("max_seq_len")
    if length:
        facts["max_model_len"] = length
    if "kv_cache_dtype" in found:
        facts["kv_cache_dtype"] = found["kv_cache_dtype"]
    if "enforce_eager" in found:
        facts["mode"] = "eager" if found["enforce_eager"] == "True" else "cuda-graph"
