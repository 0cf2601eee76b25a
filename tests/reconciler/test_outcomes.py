"""One outcome type, and the one place where exceptions become outcomes (``guarded``).

The daemon reads nothing but ``Result.outcome`` to decide what comes next (forget, back off,
re-check later, wait to be woken, stall, or nothing at all on shutdown), so each exception a
kind may raise must land on the right one.
"""

from __future__ import annotations

import pytest

from controllers.contract import PlanLike
from controllers.errors import (
    PermanentError,
    PlanError,
    ReadinessFailed,
    StillProgressing,
    TemporaryError,
)
from controllers.waiting import Stopped
from reconciler.kinds import (
    Outcome,
    ResourcePlan,
    Result,
    done,
    guarded,
    recheck,
    retry,
    stopped,
    terminal,
    wait,
)
from specs.errors import Location, SpecIssue
from state.errors import StateError
from state.keys import Key


def _raising(exc: BaseException) -> Result:
    raise exc


@pytest.mark.parametrize(("exc", "outcome", "reason", "stalled"), [
    (Stopped("shutting down"), Outcome.STOPPED, "Stopped", None),
    (StillProgressing("model loading", 2.5), Outcome.RECHECK, "Progressing", None),
    (TemporaryError("engine busy"), Outcome.RETRY, "TemporaryFailure", False),
    (PermanentError("bad image"), Outcome.TERMINAL, "ApplyFailed", True),
    (ReadinessFailed("ContainerExited", "exit 1"), Outcome.RETRY, "ContainerExited", True),
    (KeyError("oops"), Outcome.RETRY, "InternalError", False),
])
def test_each_exception_becomes_its_outcome(exc: Exception, outcome: Outcome, reason: str,
                                            stalled: bool | None) -> None:
    result = guarded(Key("Toy", "a"), lambda: _raising(exc))
    assert result.outcome is outcome
    assert result.reason == reason
    assert not result.ok
    if stalled is None:  # not a failure: nothing to record as one
        assert result.report is None
    else:
        assert result.report is not None
        assert result.report.stalled == stalled
        assert str(exc) in result.report.detail
    if outcome is Outcome.RECHECK:
        assert result.after_s == 2.5
    unreported = guarded(Key("Toy", "a"), lambda: _raising(exc), report=False)
    assert (unreported.outcome, unreported.report) == (outcome, None)


def test_a_state_directory_error_is_not_an_outcome() -> None:
    """The caller names the file (the CLI) or moves it aside (the daemon)."""
    with pytest.raises(StateError):
        guarded(Key("Toy", "a"), lambda: _raising(StateError("unreadable")))


def test_the_constructors_say_one_outcome_each() -> None:
    key = Key("K", "a")
    made = [done(key, "ok"), retry(key, "no", "R"), wait(key, "later", "W"),
            recheck(key, "loading", "P", 1.0), terminal(key, "stuck", "T"), stopped(key, "bye")]
    assert [r.outcome for r in made] == list(Outcome)
    assert [r.ok for r in made] == [True, False, False, False, False, False]
    assert made[-1].reason == "Stopped"


def test_a_delay_belongs_to_a_recheck_only() -> None:
    with pytest.raises(ValueError, match="RECHECK"):
        Result(Key("K", "a"), Outcome.RETRY, "no", "R", after_s=3.0)


@pytest.mark.parametrize(("exc", "reason", "permanent", "issues"), [
    (PlanError([SpecIssue(Location("a.yaml", 3, 1), "spec.gpus", "no such GPU", "gpu")]),
     "PlanRejected", True, 1),
    (PermanentError("unknown host key"), "ObserveFailed", True, 0),
    (TemporaryError("engine busy"), "ObserveFailed", False, 0),
    (KeyError("oops"), "InternalError", False, 0),
])
def test_each_plan_time_exception_becomes_a_plan_error(exc: Exception, reason: str,
                                                       permanent: bool, issues: int) -> None:
    rp: ResourcePlan[object, PlanLike] = ResourcePlan(Key("Toy", "a"), "a").failed(exc)
    assert rp.error is not None
    assert rp.outcome is not None
    assert rp.outcome.reason == reason
    assert rp.outcome.outcome is (Outcome.TERMINAL if permanent else Outcome.RETRY)
    assert rp.outcome.report is not None
    assert rp.outcome.report.detail == rp.error
    assert len(rp.issues) == issues


def test_a_refusal_cured_without_an_event_is_retried_within_seconds() -> None:
    """Issue 38: a port another process held came back 62.7 s after its release: the
    backoff had grown to its 30 s cap. A transient refusal caps its own backoff."""
    from controllers.contract import unplanned
    from controllers.errors import UNSEEN_CURE_RETRY_S

    issue = SpecIssue(Location("a.yaml", 3, 1), "spec.port.host", "host port 1 is taken", "port")
    rp: ResourcePlan[object, PlanLike] = ResourcePlan(Key("Toy", "a"), "a").failed(
        PlanError([issue], transient=True))
    result = unplanned(rp)
    assert (result.outcome, result.retry_within_s) == (Outcome.RETRY, UNSEEN_CURE_RETRY_S)
    stalled = unplanned(ResourcePlan(Key("Toy", "a"), "a").failed(PlanError([issue])))
    assert (stalled.outcome, stalled.retry_within_s) == (Outcome.TERMINAL, 0.0)
    with pytest.raises(ValueError, match="RETRY"):
        Result(Key("K", "a"), Outcome.TERMINAL, "no", "R", retry_within_s=3.0)


def test_observing_keeps_what_was_planned_before_the_failure() -> None:
    rp: ResourcePlan[object, PlanLike] = ResourcePlan(Key("Toy", "a"), "a")
    with rp.observing():
        rp.desired = "resolved"
        raise TemporaryError("engine busy")
    assert rp.desired == "resolved"
    assert rp.outcome is not None
    assert rp.outcome.reason == "ObserveFailed"
    with pytest.raises(KeyError), rp.observing():  # a bug is not an observation: it rises
        raise KeyError("oops")


def test_a_corrupt_record_is_reported_under_its_own_resource() -> None:
    """Issue 26: a StreamSet's pass that read its Deployment's corrupt record filed the
    CorruptState event under the StreamSet."""
    from pathlib import Path

    from reconciler.daemon import _record_of
    from state.keys import Key

    assert _record_of(Path("/s/resources/Deployment/vlm.json")) == Key("Deployment", "vlm")
    assert _record_of(Path("/s/resources/No Such Kind!/x.json")) is None
    assert _record_of(Path("/s/events.jsonl")) is None
