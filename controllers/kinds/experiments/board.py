"""Where runs execute: beside the work queue, on the Experiment kind's own workers.

A pass never runs an experiment: it launches one here and returns, then later passes observe
it (the record and ``status.json`` say where it is). The pool is small and separate, so a
16-stream canary can never hold a worker that a Deployment's repair needs; runs beyond the
limit wait their turn in phase Pending. A run this process does not know (the record says it
is under way, the board has never seen it) was interrupted by a restart.

Each run has its own stop event, set when the process shuts down (the board follows the
daemon's stop), when the run is aborted (its spec was removed), or when its time budget runs
out. Every wait of the run honours it, so a run ends within seconds; whatever it left is
cleaned up by the recovery that follows (``controllers.kinds.experiments.run.recover``).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Self

import structlog

from controllers.errors import ControllerError
from controllers.services import Part, Services
from controllers.waiting import Stopped

EXPERIMENT_WORKERS = 2
log = structlog.get_logger("controllers.kinds.experiments")
Work = Callable[[threading.Event], str]
Overrun = Callable[[], bool]  # called when the budget runs out: True to stop the run


class RunBoard(Part):
    """The Experiment kind's part of the services: runs beside the queue on their own workers;
    the services' ``stop`` (the process is shutting down) stops them too."""

    @classmethod
    def made(cls, services: Services) -> Self:
        return cls(services.stop)

    def __init__(self, stop: threading.Event | None = None,
                 workers: int = EXPERIMENT_WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="experiment")
        self._runs: dict[str, Future[str]] = {}
        self._stops: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._stop = stop  # followed from the first run on (plan and status start none)
        self._following = False

    def start(self, run_id: str, work: Work, budget_s: float | None = None,
              on_overrun: Overrun | None = None,
              on_end: Callable[[], None] | None = None) -> bool:
        """Queue ``work`` for ``run_id`` unless it is queued or running, or the process is
        shutting down; True if queued now. ``budget_s`` counts from when the run starts (not
        while it waits for a worker); then ``on_overrun`` decides whether to stop it (a run
        already cleaning up is left to its own deadline). ``on_end``: it ended, however."""
        with self._lock:
            if self._closing or self.running(run_id):
                return False
            self._follow_stop()
            stop = self._stops[run_id] = threading.Event()
            # In the starting pass's context: a replica fences the run's Docker calls by the
            # pass's share (reconciler.sharing), so a run whose Host moved to another replica
            # stops touching it.
            future = self._pool.submit(contextvars.copy_context().run, self._timed, run_id,
                                       work, stop, budget_s, on_overrun)
            if on_end is not None:
                future.add_done_callback(lambda done: _ended(done, on_end))
            self._runs[run_id] = future
            return True

    def run_inline(self, run_id: str, work: Work, budget_s: float | None = None,
                   on_overrun: Overrun | None = None) -> None:
        """Run ``work`` in the caller's thread (one-shot ``apply``), under the same budget."""
        stop = self._stops[run_id] = threading.Event()
        self._timed(run_id, work, stop, budget_s, on_overrun)

    def _timed(self, run_id: str, work: Work, stop: threading.Event, budget_s: float | None,
               on_overrun: Overrun | None) -> str:
        timer = _timer(run_id, stop, budget_s, on_overrun)
        try:
            return _logged(run_id, lambda: work(stop))
        finally:
            if timer is not None:
                timer.cancel()

    @property
    def closing(self) -> bool:
        """The process is shutting down (a run's stop then means "leave it", not "abort")."""
        return self._closing or (self._stop is not None and self._stop.is_set())

    def running(self, run_id: str) -> bool:
        future = self._runs.get(run_id)
        return future is not None and not future.done()

    def abort(self, run_id: str) -> bool:
        """Stop a run under way (its cleanup follows as a recovery); False if none is."""
        stop = self._stops.get(run_id)
        if stop is None or not self.running(run_id):
            return False
        stop.set()
        return True

    def close(self) -> None:
        """Shutting down: queued runs are dropped (still Pending, they are recovered next
        time); running ones end at their next stop check."""
        self._stop_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _follow_stop(self) -> None:
        if self._stop is None or self._following:
            return
        self._following = True
        if self._stop.is_set():
            self._closing = True
            return
        threading.Thread(target=self._follow, args=(self._stop,), name="experiment-stop",
                         daemon=True).start()

    def _follow(self, stop: threading.Event) -> None:
        stop.wait()
        self._stop_all()

    def _stop_all(self) -> None:
        with self._lock:
            self._closing = True
            for event in self._stops.values():
                event.set()


def _ended(done: Future[str], on_end: Callable[[], None]) -> None:
    """Wake the run's resource when it ended, unless it failed: a run that crashed or could
    not reach Docker is looked at again by the pass's own pace, never in a tight loop."""
    if done.cancelled() or done.result() in ("Crashed", "Failed"):
        return
    try:
        on_end()
    except Exception:  # waking a pass must never break the pool's worker
        log.exception("experiment.wake_failed")


def _timer(run_id: str, stop: threading.Event, budget_s: float | None,
           on_overrun: Overrun | None) -> threading.Timer | None:
    if budget_s is None:
        return None

    def overrun() -> None:
        log.warning("experiment.budget_exceeded", run_id=run_id, budget_s=budget_s)
        halt = True
        try:
            halt = on_overrun() if on_overrun is not None else True
        finally:  # an overrun that cannot be recorded still stops the run
            if halt:
                stop.set()
    timer = threading.Timer(max(0.0, budget_s), overrun)
    timer.daemon = True
    timer.name = f"budget-{run_id}"
    timer.start()
    return timer


def _logged(run_id: str, work: Callable[[], str]) -> str:
    try:
        result = work()
    except Stopped:
        log.info("experiment.stopped", run_id=run_id)
        return "Stopped"
    except ControllerError as exc:  # e.g. Docker went away: the next pass tries again
        log.warning("experiment.failed", run_id=run_id, error=str(exc))
        return "Failed"
    except Exception:  # a bug: the record stays under way, the next pass recovers the run
        log.exception("experiment.crashed", run_id=run_id)
        return "Crashed"
    log.info("experiment.done", run_id=run_id, result=result)
    return result
