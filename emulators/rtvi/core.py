"""Health, models, metrics, metadata and asset-stats endpoints of the emulated RTVI service.

Shapes follow ``shared/contracts/rtvi-api.md``. Where the real service's behaviour is unknown the
choice is documented here:

- ``/v1/startup`` and ``/v1/health/live`` bodies: the spec gives no schema; we answer the same
  ``health.response`` object as ready does, with their own message. ``?detailed=true`` adds a
  ``checks`` list; a ``detailed`` that is not a boolean is 422.
- While loading, and also after a fatal fault with ``RTVI_EMU_FATAL_EXIT=0``, ready answers 503
  ``Model is loading``: a real server whose engine died during load cannot tell that it will
  never finish, which is exactly why the reconciler must read fatal markers from the logs.
  ``/v1/startup`` and ``/v1/models`` document no 503: they answer 500 ``ServiceUnavailable``.
- ``/v1/version`` is ``{"release": SERVICE_VERSION, "api": "v1"}``; ``/v1/manifest`` is
  ``{"version": SERVICE_VERSION, "model": <the served model ID>}``.
- ``/v1/assets/stats``: the real shape is not published. We answer
  ``{"files":{"count":N,"bytes":B},"streams":{"count":S,"draining":D},
  "caption_requests":{"active":C},"storage_bytes":B}``: counts per asset kind plus the storage
  they hold, enough to prove "zero assets" after cleanup.
- ``/v1/metrics``: Prometheus text, one ``name value`` per line (no timestamps: the VSS harness
  splits each line on one space). The series the harness reads, with measured values:
  ``decode_latency_seconds_count``/``_sum`` (a summary of every chunk's decode time) and
  ``<stage>_latency_seconds_latest_seconds`` for ``decode``, ``vlm``, ``vlm_pipeline`` and
  ``e2e`` (the latest chunk's). The rest are the emulator's own ``rtvi_emulator_*`` names.
"""

from __future__ import annotations

from emulators.rtvi import schema, validation
from emulators.rtvi.routing import Request, Response, Router
from emulators.rtvi.state import ServiceState
from emulators.rtvi.validation import Invalid

SERVICE_VERSION = "3.2.1"
MODEL_OWNER = "nvidia"
MODEL_API_TYPE = "internal"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LOADING_CODE = "ServiceUnavailable"
LOADING_MESSAGE = "Model is loading"
API_VERSION = "v1"


def _health(state: ServiceState, request: Request, message: str, ok: bool = True) -> Response:
    try:
        detailed = schema.boolean_query(request.query.get("detailed"), "detailed")
    except Invalid as exc:
        return validation.invalid_response(exc)
    if not ok:
        return _loading()
    body: dict[str, object] = {"object": "health.response", "message": message}
    if detailed:
        body["checks"] = [
            {"name": "model", "status": "ready" if state.is_ready() else "loading"},
            {"name": "http", "status": "ok"},
        ]
    return Response.json(200, body)


def _loading(status: int = 503) -> Response:
    return Response.error(status, LOADING_CODE, LOADING_MESSAGE)


def ready(state: ServiceState, request: Request) -> Response:
    return _health(state, request, "Service is ready.", state.is_ready())


def live(state: ServiceState, request: Request) -> Response:
    return _health(state, request, "Service is live.")


def startup(state: ServiceState, _request: Request) -> Response:
    if not state.is_ready():
        return _loading(500)
    return Response.json(200, {"object": "health.response", "message": "Service has started."})


def version(_state: ServiceState, _request: Request) -> Response:
    return Response.json(200, {"release": SERVICE_VERSION, "api": API_VERSION})


def manifest(state: ServiceState, _request: Request) -> Response:
    return Response.json(200, {"version": SERVICE_VERSION, "model": state.settings.model_id})


def models(state: ServiceState, _request: Request) -> Response:
    if not state.is_ready():
        return _loading(500)
    data: list[dict[str, object]] = []
    if not state.settings.no_models:
        data.append(
            {
                "id": state.settings.model_id,
                "created": state.created_unix,
                "object": "model",
                "owned_by": MODEL_OWNER,
                "api_type": MODEL_API_TYPE,
            }
        )
    return Response.json(200, {"object": "list", "data": data, "audio_support": False})


def metadata(_state: ServiceState, _request: Request) -> Response:
    return Response.json(200, {"version": SERVICE_VERSION})


def asset_stats(state: ServiceState, _request: Request) -> Response:
    gauges = state.gauges()
    file_bytes = int(gauges.get("file_bytes", 0))
    return Response.json(
        200,
        {
            "files": {"count": int(gauges.get("files", 0)), "bytes": file_bytes},
            "streams": {
                "count": int(gauges.get("streams", 0)),
                "draining": int(gauges.get("draining_streams", 0)),
            },
            "caption_requests": {"active": int(gauges.get("caption_requests", 0))},
            "storage_bytes": file_bytes,
        },
    )


# The series the VSS harness reads (``<stage>_latency_seconds_latest_seconds``), and their help.
PIPELINE_STAGES = (
    ("decode", "Decode time"),
    ("vlm", "Model time"),
    ("vlm_pipeline", "Decode and model time"),
    ("e2e", "Source stamp of the last frame to the answer"),
)

# name, type, help, gauges() key
INVENTORY_METRICS = (
    (
        "rtvi_emulator_draining_streams",
        "gauge",
        "Streams deleted but still draining.",
        "draining_streams",
    ),
    ("rtvi_emulator_caption_requests", "gauge", "Active caption requests.", "caption_requests"),
    ("rtvi_emulator_files", "gauge", "Uploaded files.", "files"),
    ("rtvi_emulator_file_bytes", "gauge", "Bytes held by uploaded files.", "file_bytes"),
    ("rtvi_emulator_chunks_total", "counter", "Caption chunks answered.", "chunks_total"),
    (
        "rtvi_emulator_empty_chunks_total",
        "counter",
        "Caption chunks without a fresh frame.",
        "empty_chunks_total",
    ),
    (
        "rtvi_emulator_decoded_frames_total",
        "counter",
        "Frames decoded by live streams' decoders.",
        "decoded_frames_total",
    ),
    (
        "rtvi_emulator_decoder_restarts_total",
        "counter",
        "Decoder (ffmpeg) restarts.",
        "decoder_restarts_total",
    ),
    (
        "rtvi_emulator_injected_faults_total",
        "counter",
        "Requests answered by an injected fault.",
        "injected_faults_total",
    ),
)


def _label(value: str) -> str:
    """Escape a Prometheus label value (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(state: ServiceState) -> str:
    lines = [
        "# HELP rtvi_emulator_requests_total HTTP requests served, by method, route and status.",
        "# TYPE rtvi_emulator_requests_total counter",
    ]
    for (method, route, status), count in sorted(state.request_counts().items()):
        lines.append(
            f'rtvi_emulator_requests_total{{method="{_label(method)}",path="{_label(route)}",'
            f'status="{status}"}} {count}'
        )
    lines += [
        "# HELP rtvi_emulator_uptime_seconds Seconds since the emulator process started.",
        "# TYPE rtvi_emulator_uptime_seconds gauge",
        f"rtvi_emulator_uptime_seconds {state.uptime_s():.3f}",
        "# HELP rtvi_emulator_ready 1 when the emulated model is loaded and serving, else 0.",
        "# TYPE rtvi_emulator_ready gauge",
        f"rtvi_emulator_ready {1 if state.is_ready() else 0}",
        "# HELP rtvi_emulator_active_streams Live streams currently registered.",
        "# TYPE rtvi_emulator_active_streams gauge",
        f"rtvi_emulator_active_streams {state.active_streams()}",
    ]
    gauges = state.gauges()
    for name, kind, text, key in INVENTORY_METRICS:
        lines += [
            f"# HELP {name} {text}",
            f"# TYPE {name} {kind}",
            f"{name} {gauges.get(key, 0):g}",
        ]
    lines += [
        "# HELP decode_latency_seconds Time to select and decode a chunk's frames.",
        "# TYPE decode_latency_seconds summary",
        f"decode_latency_seconds_sum {gauges.get('decode_latency_seconds_sum', 0):g}",
        f"decode_latency_seconds_count {gauges.get('decode_latency_seconds_count', 0):g}",
    ]
    for stage, text in PIPELINE_STAGES:
        name = f"{stage}_latency_seconds_latest_seconds"
        lines += [f"# HELP {name} {text} of the latest chunk.", f"# TYPE {name} gauge",
                  f"{name} {gauges.get(name, 0):g}"]
    errors = sum(
        count for (_m, _r, status), count in state.request_counts().items() if status >= 500
    )
    lines += [
        "# HELP rtvi_emulator_errors_total Responses with a 5xx status.",
        "# TYPE rtvi_emulator_errors_total counter",
        f"rtvi_emulator_errors_total {errors}",
    ]
    return "\n".join(lines) + "\n"


def metrics(state: ServiceState, _request: Request) -> Response:
    return Response.text(200, render_metrics(state), PROMETHEUS_CONTENT_TYPE)


def register(router: Router) -> None:
    """Add this group's routes; aliases share one handler."""
    router.get("/v1/health/ready", "/v1/ready")(ready)
    router.get("/v1/health/live", "/v1/live")(live)
    router.get("/v1/startup")(startup)
    router.get("/v1/models")(models)
    router.get("/v1/metrics")(metrics)
    router.get("/v1/metadata")(metadata)
    router.get("/v1/assets/stats")(asset_stats)
    router.get("/v1/version")(version)
    router.get("/v1/manifest")(manifest)
