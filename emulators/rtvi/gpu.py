"""The emulated service's GPU memory, on an ``emulators.gpuboard`` (``RTVI_EMU_GPU_BOARD``):
allocated when the model is loaded, released on shutdown except the configured leak."""

from __future__ import annotations

import json
import os
import urllib.request

from emulators.rtvi import logs
from emulators.rtvi.config import Settings

TIMEOUT_S = 5


def _post(settings: Settings, path: str, body: dict[str, object], sink: logs.LogSink) -> None:
    if not settings.gpu_board:
        return
    request = urllib.request.Request(settings.gpu_board.rstrip("/") + path,
                                     data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S):
            pass
    except OSError as exc:  # URLError included
        sink.error(f"ERROR:    GPU board {settings.gpu_board}{path}: {exc}")


def owner(settings: Settings) -> str:
    return f"rtvi-emulator-{os.getpid()}-{settings.port}"


def allocate(settings: Settings, sink: logs.LogSink) -> None:
    _post(settings, "/alloc", {"owner": owner(settings), "mib": settings.gpu_mib}, sink)
    if settings.gpu_board:
        sink.info(f"INFO:     model weights: {settings.gpu_mib} MiB on the GPU")


def release(settings: Settings, sink: logs.LogSink) -> None:
    _post(settings, "/free", {"owner": owner(settings), "keep_mib": settings.gpu_leak_mib}, sink)
