"""Where runs execute: beside the work queue, on the Experiment kind's own workers.

A pass never runs an experiment: it launches one here and returns, then later passes observe
it (the record and ``status.json`` say where it is). The pool is small and separate, so a
16-stream canary can never hold a worker that a Deployment's repair needs; runs beyond the
limit wait their turn in phase Pending. A run this process does not know (the record says it
is under way, the board has never seen it) was interrupted by a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from controllers.waiting import Stopped

EXPERIMENT_WORKERS = 2
log = structlog.get_logger("controllers.experiments")


class RunBoard:
    def __init__(self, workers: int = EXPERIMENT_WORKERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="experiment")
        self._runs: dict[str, Future[str]] = {}
        self._lock = threading.Lock()

    def start(self, run_id: str, work: Callable[[], str]) -> bool:
        """Queue ``work`` for ``run_id`` unless it is queued or running; True if queued now."""
        with self._lock:
            if self.running(run_id):
                return False
            self._runs[run_id] = self._pool.submit(_logged, run_id, work)
            return True

    def running(self, run_id: str) -> bool:
        future = self._runs.get(run_id)
        return future is not None and not future.done()

    def close(self) -> None:
        """Shutting down: queued runs are dropped (still Pending, they start next time);
        running ones end at their next stop check."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _logged(run_id: str, work: Callable[[], str]) -> str:
    try:
        result = work()
    except Stopped:
        log.info("experiment.stopped", run_id=run_id)
        return "Stopped"
    except Exception:  # a bug: the record stays under way, the next pass recovers the run
        log.exception("experiment.crashed", run_id=run_id)
        return "Crashed"
    log.info("experiment.done", run_id=run_id, result=result)
    return result
