"""The VSS perf harness as a spec names it: shared by ``type: benchmark`` (one scenario) and
``capacity.harness`` (its max_live_streams search)."""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import Field, field_validator

from specs.models import AbsolutePath, Strict, normal_path_problem
from specs.trust import reads, runs

KnobValue = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:/-]{0,64}$")]
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
SCENARIO_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$"  # never an option: no leading -


class HarnessSpec(Strict):
    """The VSS perf harness in a checkout on the Host: how to start it, and where in its config
    the run writes its report directory and its fresh service's API base (``<url>/v1``). The
    run's CONFIG handle is a copy of ``config`` under the same file name (the harness's BCD
    live-source guard keys on it) with only those keys (and ``vlm_api_mode`` when ``apiMode``
    is set) changed."""

    argv: list[str] = runs(min_length=1, max_length=32)  # [python3, perf/benchmark/...py]
    workdir: AbsolutePath = reads("harness")  # e.g. /opt/vss/services/rtvi/rt-vlm
    # relative to workdir, or absolute
    config: str = reads("harness", relative_to="workdir", min_length=1, max_length=1000)
    outputDirKey: str = Field(default="global.output_dir", pattern=r"^[A-Za-z_][\w.-]*$")
    serviceUrlKey: str = Field(default="global.rtvi_backend", pattern=r"^[A-Za-z_][\w.-]*$")
    # The harness's own knobs: short plain values (letters, digits, _ . : / -).
    env: dict[HarnessKnob, KnobValue] = Field(default_factory=dict)

    @field_validator("config")
    @classmethod
    def _inside_workdir(cls, value: str) -> str:
        """A relative config stays inside the checkout (no ``..`` out of it); an absolute one
        is written in normal form, like every path."""
        if value.startswith("/"):
            problem = normal_path_problem(value)
            if problem is not None:
                raise ValueError(problem)
        elif (posixpath.normpath(value) != value or value == "."
              or value.startswith(("..", "-"))):
            raise ValueError("a relative config path names a file inside workdir, normalised "
                             "(no '.', '..', '//' or leading '-'; normalised: "
                             f"{posixpath.normpath(value)!r})")
        return value


