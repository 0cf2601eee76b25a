"""The RTVI emulator as a real process: endpoint shapes, start-up timeline, knobs, faults, signals.

Each test starts ``python -m emulators.rtvi`` on a free loopback port and talks HTTP to it; no
fixed sleeps, every wait is a poll of the thing itself (readiness, exit, a log line).
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import pytest

from controllers.waiting import until
from emulators.rtvi.server import EmulatorHandler
from emulators.vst.server import ApiHandler
from tests.emulators.helpers import POLL_INTERVAL_S, EmulatorProcess, http_client, wait_for

StartEmulator = Callable[..., EmulatorProcess]

VLLM_STAMP = r"\d\d-\d\d \d\d:\d\d:\d\d"
LOADING_BODY = {"code": "ServiceUnavailable", "message": "Model is loading"}
READY_BODY = {"object": "health.response", "message": "Service is ready."}
STARTUP_COMPLETE = "INFO:     Application startup complete."
CUDA_GRAPHS_RE = re.compile(
    rf"^INFO {VLLM_STAMP} \[gpu_model_runner\.py:2000\] Capturing CUDA graphs "
    r"\(mixed prefill-decode, PIECEWISE\): 100%\|##########\| 67/67$",
    re.MULTILINE,
)
FATAL_LINE_RE = r"^ERROR {stamp} \[[a-z_]+\.py:\d+\] .*{marker}"
PROMETHEUS_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? -?[0-9.e+-]+$")


def engine_line_re(
    model: str, trust: str, max_len: str, quant: str, eager: str, kv: str
) -> re.Pattern[str]:
    return re.compile(
        rf"^INFO {VLLM_STAMP} \[core\.py:69\] Initializing a V1 LLM engine \(v0\.10\.1\) with "
        rf"config: model='{re.escape(model)}', speculative_config=None, "
        rf"tokenizer='{re.escape(model)}', trust_remote_code={trust}, dtype=torch\.bfloat16, "
        rf"max_seq_len={max_len}, quantization={quant}, enforce_eager={eager}, "
        rf"kv_cache_dtype={re.escape(kv)}, device_config=cuda, seed=0$",
        re.MULTILINE,
    )


def test_loading_answers_503_or_500_then_ready(start_emulator: StartEmulator) -> None:
    delay = 0.8
    emulator = start_emulator(RTVI_EMU_STARTUP_DELAY_S=str(delay))
    emulator.wait_listening()

    # 503 where the spec documents it (the probes); 500 where it does not.
    for path, status in (("/v1/health/ready", 503), ("/v1/ready", 503), ("/v1/startup", 500),
                         ("/v1/models", 500)):
        response = emulator.get(path)
        assert response.status_code == status, path
        assert response.json() == LOADING_BODY, path
    live = emulator.get("/v1/health/live")
    assert live.status_code == 200
    assert emulator.get("/v1/live").status_code == 200
    assert "rtvi_emulator_ready 0" in emulator.get("/v1/metrics").text
    assert STARTUP_COMPLETE not in emulator.stdout()

    assert emulator.wait_ready() >= delay
    for path in ("/v1/health/ready", "/v1/ready"):
        response = emulator.get(path)
        assert (response.status_code, response.json()) == (200, READY_BODY), path
    assert emulator.get("/v1/startup").status_code == 200
    assert emulator.get("/v1/models").status_code == 200
    assert "rtvi_emulator_ready 1" in emulator.get("/v1/metrics").text
    out = wait_for(lambda: emulator.stdout() if STARTUP_COMPLETE in emulator.stdout() else None)
    engine = engine_line_re("emulated-vlm", "False", "32768", "None", "False", "auto")
    engine_at = engine.search(out)
    graphs_at = CUDA_GRAPHS_RE.search(out)
    assert engine_at is not None, out
    assert graphs_at is not None, out
    assert engine_at.start() < graphs_at.start() < out.index(STARTUP_COMPLETE)


@pytest.mark.parametrize(
    ("env", "expected_id"),
    [
        ({}, "emulated-vlm"),
        ({"VLM_MODEL_TO_USE": "cosmos-reason1"}, "cosmos-reason1"),
        ({"VLM_MODEL_TO_USE": "cosmos-reason1", "RTVI_EMU_MODEL_ID": "my-port"}, "my-port"),
    ],
)
def test_models_lists_the_configured_id(
    start_emulator: StartEmulator, env: dict[str, str], expected_id: str
) -> None:
    emulator = start_emulator(**env)
    emulator.wait_ready()
    body = emulator.get("/v1/models").json()
    assert set(body) == {"object", "data", "audio_support"}
    assert body["object"] == "list"
    assert body["audio_support"] is False
    [model] = body["data"]
    assert model == {
        "id": expected_id,
        "created": model["created"],
        "object": "model",
        "owned_by": "nvidia",
        "api_type": "internal",
    }
    assert isinstance(model["created"], int)
    assert abs(model["created"] - time.time()) < 60


def test_no_models_knob_lists_nothing(start_emulator: StartEmulator) -> None:
    emulator = start_emulator(RTVI_EMU_NO_MODELS="1", VLM_MODEL_TO_USE="cosmos-reason1")
    emulator.wait_ready()
    response = emulator.get("/v1/models")
    assert response.status_code == 200
    assert response.json() == {"object": "list", "data": [], "audio_support": False}


def test_metadata_assets_and_error_shapes(start_emulator: StartEmulator) -> None:
    emulator = start_emulator()
    emulator.wait_ready()
    # One keep-alive connection for all: every response must carry an exact length.
    with http_client(emulator.base_url) as client:
        assert client.get("/v1/metadata").json() == {"version": "3.2.1"}
        assert client.get("/v1/assets/stats").json() == {
            "files": {"count": 0, "bytes": 0},
            "streams": {"count": 0, "draining": 0},
            "caption_requests": {"active": 0},
            "storage_bytes": 0,
        }
        missing = client.get("/v1/no-such-thing")
        assert missing.status_code == 404
        assert missing.json()["code"] == "NotFound"
        assert set(missing.json()) == {"code", "message"}
        assert isinstance(missing.json()["message"], str)
        wrong = client.post("/v1/models", json={"x": 1})
        assert wrong.status_code == 405
        assert wrong.json()["code"] == "MethodNotAllowed"
        assert set(wrong.json()) == {"code", "message"}
        assert wrong.headers["allow"] == "GET"
        assert client.delete("/v1/health/ready").status_code == 405
        assert client.get("/v1/health/ready").status_code == 200


def test_metrics_are_prometheus_text(start_emulator: StartEmulator) -> None:
    emulator = start_emulator()
    emulator.wait_ready()
    for _ in range(3):
        emulator.get("/v1/metadata")
    emulator.get("/v1/nothing-here")
    response = emulator.get("/v1/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, str] = {}
    for line in response.text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_][a-z0-9_]* ", line), line
            continue
        assert PROMETHEUS_SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        samples[name] = value
    assert (
        samples['rtvi_emulator_requests_total{method="GET",path="/v1/metadata",status="200"}']
        == "3"
    )
    assert (
        samples['rtvi_emulator_requests_total{method="GET",path="<unmatched>",status="404"}'] == "1"
    )
    assert float(samples["rtvi_emulator_uptime_seconds"]) > 0
    assert samples["rtvi_emulator_ready"] == "1"
    assert samples["rtvi_emulator_active_streams"] == "0"
    assert "# TYPE rtvi_emulator_requests_total counter" in response.text


@pytest.mark.parametrize(
    ("env", "line", "graphs"),
    [
        (
            {
                "MODEL_PATH": "ngc:nim/nvidia/cosmos-reason1-7b-FP8",
                "VLM_TRUST_REMOTE_CODE": "true",
                "VLLM_ENFORCE_EAGER": "true",
                "RTVI_EMU_MAX_MODEL_LEN": "4096",
                "RTVI_EMU_KV_CACHE_DTYPE": "fp8",
            },
            ("ngc:nim/nvidia/cosmos-reason1-7b-FP8", "True", "4096", "fp8", "True", "fp8"),
            False,
        ),
        (
            {"MODEL_PATH": "/models/qwen2.5-vl-7b-nvfp4", "VLLM_ENFORCE_EAGER": "false"},
            ("/models/qwen2.5-vl-7b-nvfp4", "False", "32768", "nvfp4", "False", "auto"),
            True,
        ),
    ],
)
def test_startup_log_lines_carry_runtime_facts(
    start_emulator: StartEmulator,
    env: dict[str, str],
    line: tuple[str, str, str, str, str, str],
    graphs: bool,
) -> None:
    emulator = start_emulator(**env)
    emulator.wait_ready()
    out = wait_for(lambda: emulator.stdout() if STARTUP_COMPLETE in emulator.stdout() else None)
    assert engine_line_re(*line).search(out), out
    assert bool(CUDA_GRAPHS_RE.search(out)) is graphs, out
    assert all("\n" not in entry for entry in out.splitlines())


@pytest.mark.parametrize(
    "marker",
    ["CUDA out of memory", "EngineDeadError", "FMHA kernels are not found", "Weird fault 42"],
)
def test_fatal_marker_exits_1(start_emulator: StartEmulator, marker: str) -> None:
    emulator = start_emulator(RTVI_EMU_FATAL=marker, RTVI_EMU_FATAL_AFTER_S="0.3")
    readies: list[bool] = []

    def exited() -> bool | None:
        response = emulator.try_get("/v1/health/ready")
        readies.append(response is not None and response.status_code == 200)
        return True if emulator.process.poll() is not None else None
    assert until(exited, timeout_s=10, pace=POLL_INTERVAL_S), "fatal emulator did not exit"
    assert emulator.wait_exit() == 1
    assert not any(readies)
    pattern = FATAL_LINE_RE.format(stamp=VLLM_STAMP, marker=re.escape(marker))
    assert re.search(pattern, emulator.stderr(), re.MULTILINE), emulator.stderr()
    assert STARTUP_COMPLETE not in emulator.stdout()


def test_fatal_without_exit_keeps_serving_never_ready(start_emulator: StartEmulator) -> None:
    marker = "CUDA out of memory"
    emulator = start_emulator(
        RTVI_EMU_FATAL=marker, RTVI_EMU_FATAL_AFTER_S="0.1", RTVI_EMU_FATAL_EXIT="0"
    )
    wait_for(lambda: True if marker in emulator.stderr() else None, what="the fatal marker")
    assert emulator.process.poll() is None
    assert emulator.get("/v1/health/live").status_code == 200
    ready = emulator.get("/v1/health/ready")
    assert (ready.status_code, ready.json()) == (503, LOADING_BODY)
    assert emulator.get("/v1/models").status_code == 500
    assert emulator.get("/v1/startup").status_code == 500
    assert STARTUP_COMPLETE not in emulator.stdout()
    emulator.signal(signal.SIGTERM)
    assert emulator.wait_exit() == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("when", ["ready", "loading"])
def test_signal_exits_0_promptly(start_emulator: StartEmulator, signum: int, when: str) -> None:
    emulator = start_emulator(RTVI_EMU_STARTUP_DELAY_S="0" if when == "ready" else "300")
    if when == "ready":
        emulator.wait_ready()
    else:
        emulator.wait_listening()
    emulator.signal(signum)
    assert emulator.wait_exit(timeout=3) == 0
    assert "Traceback" not in emulator.stderr()


@pytest.mark.parametrize("fatal", [False, True])
def test_secrets_in_env_are_never_printed(start_emulator: StartEmulator, fatal: bool) -> None:
    canaries = {
        "NGC_API_KEY": "nvapi-CANARY-7f3a9d",
        "HF_TOKEN": "hf_CANARYtoken4421",
        "VLM_CREDENTIAL": "CANARY-vlm-99",
    }
    knobs = {
        **canaries,
        "MODEL_PATH": "git:https://porter:CANARY-gitpass@example.invalid/models/vlm.git",
    }
    if fatal:
        knobs.update(RTVI_EMU_FATAL="EngineDeadError", RTVI_EMU_FATAL_AFTER_S="0.05")
        emulator = start_emulator(**knobs)
        assert emulator.wait_exit() == 1
    else:
        emulator = start_emulator(**knobs)
        emulator.wait_ready()
        with http_client(emulator.base_url) as client:
            client.get("/v1/models", headers={"Authorization": f"Bearer {canaries['HF_TOKEN']}"})
            client.get("/v1/metrics")
            client.get("/v1/missing")
        emulator.signal(signal.SIGTERM)
        assert emulator.wait_exit() == 0
    output = emulator.stdout() + emulator.stderr()
    assert "Initializing a V1 LLM engine" in output  # the model line was printed, masked
    assert "CANARY" not in output, output


def test_malformed_knob_exits_2_without_echoing_it(start_emulator: StartEmulator) -> None:
    emulator = start_emulator(RTVI_EMU_STARTUP_DELAY_S="CANARY-not-a-number")
    assert emulator.wait_exit() == 2
    assert "RTVI_EMU_STARTUP_DELAY_S" in emulator.stderr()
    assert "CANARY" not in emulator.stdout() + emulator.stderr()


def test_the_emulators_answer_kept_alive_connections_without_nagle_waits() -> None:
    """Headers and body go out in two writes: with Nagle's algorithm on, every request after
    the first on a kept-alive connection waited ~40 ms for the client's delayed ACK (40
    requests took 1.7 s instead of 21 ms). uvicorn, the real service's server, sets
    TCP_NODELAY; so must the emulators."""
    assert EmulatorHandler.disable_nagle_algorithm is True
    assert ApiHandler.disable_nagle_algorithm is True
