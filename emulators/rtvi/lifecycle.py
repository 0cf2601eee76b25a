"""The simulated model load: what the real container does between "listening" and "ready".

Why a timeline thread: the real service answers HTTP (503) for minutes while it loads a model,
then prints "Application startup complete." and turns ready -- or dies with a fatal marker
(``CUDA out of memory``, ``EngineDeadError``, ...) and never becomes ready. Readiness budgets,
fatal-log detection and restart handling in the reconciler are only testable against that
timeline, compressed here to ``RTVI_EMU_STARTUP_DELAY_S``.

Choices where the real behaviour has no single answer:
- A configured fatal marker means the load never completes, whatever the start-up delay; it fires
  ``RTVI_EMU_FATAL_AFTER_S`` after start.
- The CUDA-graph line (skipped in eager mode) comes at 90 % of the delay, as graph capture is the
  last step of a real load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from emulators.rtvi import gpu, logs
from emulators.rtvi.state import ServiceState

GRAPH_CAPTURE_FRACTION = 0.9
FATAL_EXIT_CODE = 1


class Lifecycle:
    """Runs the load timeline on a daemon thread; ``request_exit`` ends the process on a fault."""

    def __init__(
        self,
        state: ServiceState,
        sink: logs.LogSink,
        request_exit: Callable[[int], None],
        advertised: tuple[str, int],
    ) -> None:
        self._state = state
        self._sink = sink
        self._request_exit = request_exit
        self._advertised = advertised
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rtvi-lifecycle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _sleep(self, seconds: float) -> bool:
        """Wait; True when the emulator is shutting down meanwhile."""
        return self._stop.wait(seconds) if seconds > 0 else self._stop.is_set()

    def _run(self) -> None:
        settings = self._state.settings
        self._sink.info(logs.non_default_args_line(settings))
        self._sink.info(logs.engine_init_line(settings))
        self._sink.info(logs.preprocess_workers_line(settings))
        if settings.fatal_marker is not None:
            self._fail(settings.fatal_marker, settings.fatal_after_s, settings.fatal_exit)
            return
        capture_at = settings.startup_delay_s * GRAPH_CAPTURE_FRACTION
        if self._sleep(capture_at):
            return
        if not settings.enforce_eager:
            self._sink.info(logs.cuda_graphs_line())
        if self._sleep(settings.startup_delay_s - capture_at):
            return
        gpu.allocate(settings, self._sink)
        self._state.mark_ready()
        self._sink.info(logs.STARTUP_COMPLETE_LINE)
        self._sink.info(logs.running_line(*self._advertised))

    def _fail(self, marker: str, after_s: float, exit_process: bool) -> None:
        if self._sleep(after_s):
            return
        self._state.mark_failed()
        for line in logs.fatal_lines(marker):
            self._sink.error(line)
        if exit_process:
            self._request_exit(FATAL_EXIT_CODE)
