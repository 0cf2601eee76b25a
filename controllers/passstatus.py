"""The one place where a pass's outcome becomes its record's conditions and events.

A kind reports what it saw (``Report.facts``) and how the pass ended (its ``Result``); the
engine hands both here when the pass ends, and the record is written once: the facts, then
the conditions the outcome implies. Done: Ready, not Progressing, not Degraded, not Stalled.
Retry or wait: Degraded (Ready Unknown unless the kind knows it is not Ready). Terminal:
Stalled, a person must look. A re-check or a stop writes nothing here (a phase under way is
noted when it starts; a shutdown is no failure). A failure is an event when it is new and
one short line when it repeats; a write that would change nothing does not happen
(``Store.update``).
"""

from __future__ import annotations

import structlog

from controllers.contract import Outcome, Report, Result, retry
from state.errors import StateError
from state.models import ResourceStatus
from state.store import Store

log = structlog.get_logger("controllers.passstatus")
FAILED = (Outcome.RETRY, Outcome.WAIT, Outcome.TERMINAL)


def write_status(store: Store, result: Result, generation: str | None) -> Result:
    """Write ``result.report`` into the record of ``result.resource`` (nothing without one);
    the pass's result. ``generation``: the spec hash the pass worked from (the record's
    desired generation). A kind's facts that fail to apply are a bug in the kind: the pass
    becomes a failed one, recorded as such (never a traceback, never a silent gap)."""
    report = result.report
    if report is None or result.outcome not in (Outcome.DONE, *FAILED):
        return result
    try:
        if result.outcome is Outcome.DONE:
            _ready(store, result, report, generation)
        else:
            _failed(store, result, report, generation)
        return result
    except StateError:
        raise  # the state directory, not the kind: the caller names the file
    except Exception as exc:
        log.exception("status.unwritten", resource=result.resource)
        message = f"{type(exc).__name__}: {exc} (a bug: please report it)"
        failed = retry(result.resource, f"InternalError: {message}", "InternalError",
                       changed=result.changed, wake=result.wake, report=Report(detail=message))
        _failed(store, failed, Report(detail=message), generation)
        return failed


def _ready(store: Store, result: Result, report: Report, generation: str | None) -> None:
    def mutate(st: ResourceStatus) -> None:
        if report.facts is not None:
            report.facts(st)
        if generation is not None:
            st.desired_generation = generation
        st.set_condition("Ready", "True", result.reason or "Ready",
                         report.detail or result.message)
        st.set_condition("Progressing", "False", "Converged", "")
        st.set_condition("Degraded", "False", "Healthy", "")
        st.set_condition("Stalled", "False", "Converged", "")
    store.update_unless_known(result.resource, mutate, report.known)


def _failed(store: Store, result: Result, report: Report, generation: str | None) -> None:
    """Stalled (a person must act) or Degraded (retried); the same failure again is one short
    line in the event log, not a repeat."""
    reason, message = result.reason or "Failed", report.detail or result.message
    stalled = report.stalled if report.stalled is not None else (
        result.outcome is Outcome.TERMINAL)
    before = store.load(result.resource)
    previous = before.condition("Ready") if before is not None else None

    def mutate(st: ResourceStatus) -> None:
        if report.facts is not None:
            report.facts(st)
        st.set_condition("Ready", report.ready or ("False" if stalled else "Unknown"), reason,
                         message)
        st.set_condition("Progressing", "False", reason, "")
        st.set_condition("Stalled" if stalled else "Degraded", "True", reason, message)
        if generation is not None:
            st.desired_generation = generation
    store.update(result.resource, mutate)
    if previous is None or (previous.reason, previous.message) != (reason, message):
        store.events.append(result.resource, "Warning", reason, message)
    else:
        store.events.append(result.resource, "Warning", "RetryFailed", reason)
    log.warning("resource.failed", resource=result.resource, reason=reason, message=message)
