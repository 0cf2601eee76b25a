"""Runtime facts and fatal markers read from an RT-VLM container's logs (rule 11).

vLLM prints its engine config once at start-up (``... with config: model='…', dtype=…,
max_seq_len=…, quantization=…, enforce_eager=…, kv_cache_dtype=…``), the arguments it was given
beyond its defaults (``non-default args: {'gpu_memory_utilization': 0.85, 'max_num_seqs': 64,
...}``: GPU memory utilisation, the scheduler's limits, the multimodal and prefix caches) and
"Capturing CUDA graphs" when graphs are used; RT-VLM says how many preprocess workers it runs
(``preprocess workers: N``). We record what we find; absent facts are simply absent. These are
the runtime's own words, the evidence a requested environment variable is not (perf-testing
guide: "Requested environment variables alone are not runtime proof").
"""

from __future__ import annotations

import re

FATAL_MARKERS = ("EngineDeadError", "CUDA out of memory", "FMHA kernels are not found")
_CONFIG_FIELDS = ("dtype", "max_seq_len", "max_model_len", "quantization", "enforce_eager",
                  "kv_cache_dtype")
_FIELD_RE = re.compile(r"\b(" + "|".join(_CONFIG_FIELDS) + r")=('[^']*'|[^,\s]+)")


# vLLM's non-default arguments (a Python dict in the log) and RT-VLM's worker count
ARG_FACTS = ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
             "enable_prefix_caching", "mm_processor_cache_gb")
_ARG_RE = re.compile(r"'(" + "|".join(ARG_FACTS) + r")': ('[^']*'|[^,}\s]+)")
VLLM_DEFAULT = "vLLM default (not in its non-default args)"
_WORKERS_RE = re.compile(r"\bpreprocess workers: (\d+)")


def fatal_marker(line: str) -> str | None:
    """The fatal marker a log line carries, if any."""
    for marker in FATAL_MARKERS:
        if marker in line:
            return marker
    return None


def update_facts(facts: dict[str, str], line: str) -> None:
    """Fold one log line into ``facts``: precision, max_model_len, kv_cache_dtype and mode from
    the engine config; memory utilisation, scheduler limits and caches from the non-default
    args (one vLLM left at its default is said so); preprocess workers from RT-VLM's line (a
    shape the emulator prints; the real service's is not published)."""
    if "Capturing CUDA graphs" in line:
        facts["mode"] = "cuda-graph"
        return
    if "non-default args:" in line:  # vLLM lists only what differs from its defaults
        found = {key: raw.strip("'") for key, raw in _ARG_RE.findall(line)}
        facts.update({key: found.get(key, VLLM_DEFAULT) for key in ARG_FACTS})
        return
    workers = _WORKERS_RE.search(line)
    if workers:
        facts["preprocess_workers"] = workers[1]
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
