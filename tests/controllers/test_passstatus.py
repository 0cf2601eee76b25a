"""The one place a pass's outcome becomes conditions and events (``controllers.passstatus``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controllers.contract import (
    Outcome,
    Report,
    Result,
    done,
    recheck,
    retry,
    stopped,
    terminal,
    wait,
)
from controllers.passstatus import write_status
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store

KEY = Key("Toy", "a")


def _conditions(store: Store) -> dict[str, tuple[str, str, str]]:
    record = store.load(KEY)
    assert record is not None
    return {c.type: (c.status, c.reason, c.message) for c in record.conditions}


def _reasons(store: Store) -> list[str]:
    return [e.reason for e in store.events.read(resource=KEY)]


def test_done_writes_the_facts_and_ready_once_and_again_writes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)

    def facts(st: ResourceStatus) -> None:
        st.facts["colour"] = "amber"
    result = done(KEY, "Ready: lit (no changes)", "Lit", report=Report("lit amber", facts))
    write_status(store, result, "hash-1")
    assert _conditions(store) == {"Ready": ("True", "Lit", "lit amber"),
                                  "Progressing": ("False", "Converged", ""),
                                  "Degraded": ("False", "Healthy", ""),
                                  "Stalled": ("False", "Converged", "")}
    record = store.load(KEY)
    assert record is not None
    assert (record.facts, record.desired_generation) == ({"colour": "amber"}, "hash-1")
    path = next(tmp_path.rglob("a.json"))
    before = path.stat().st_mtime_ns
    write_status(store, result, "hash-1")
    assert path.stat().st_mtime_ns == before  # the same pass again changes nothing on disk


@pytest.mark.parametrize(("result", "ready", "flag"), [
    (retry(KEY, "TemporaryFailure: busy", "TemporaryFailure", report=Report("busy")),
     "Unknown", "Degraded"),
    (wait(KEY, "waiting for Switch/hall", "WaitingForSwitch",
          report=Report("waiting for Switch/hall")), "Unknown", "Degraded"),
    (terminal(KEY, "Conflict: taken", "Conflict", report=Report("taken")), "False", "Stalled"),
    (retry(KEY, "ReadinessFailed: exit 1", "ContainerExited",
           report=Report("exit 1", stalled=True)), "False", "Stalled"),
    (retry(KEY, "SourcesDegraded: dead", "SourcesDegraded",
           report=Report("dead", ready="False")), "False", "Degraded"),
])
def test_a_failure_is_degraded_or_stalled_and_its_repeat_is_one_short_event(
        tmp_path: Path, result: Result, ready: str, flag: str) -> None:
    store = Store(tmp_path)
    assert result.report is not None
    write_status(store, result, None)
    said = _conditions(store)
    assert said["Ready"] == (ready, result.reason, result.report.detail)
    assert said[flag] == ("True", result.reason, result.report.detail)
    assert said["Progressing"][0] == "False"
    write_status(store, result, None)
    assert _reasons(store) == [result.reason, "RetryFailed"]


@pytest.mark.parametrize("result", [
    recheck(KEY, "loading", "Progressing", 1.0), stopped(KEY, "bye"), done(KEY, "ok"),
    retry(KEY, "unreported", "R")])
def test_a_pass_with_nothing_to_report_writes_nothing(tmp_path: Path, result: Result) -> None:
    store = Store(tmp_path)
    write_status(store, result, "hash-1")
    assert store.load(KEY) is None
    assert _reasons(store) == []


def test_facts_that_fail_to_apply_make_a_failed_pass_recorded_as_one(tmp_path: Path) -> None:
    """A bug in a kind's facts is a failed pass (InternalError, retried), never a traceback
    from ``apply`` or a dead worker, and what it would have woken is still woken."""
    store = Store(tmp_path)

    def broken(st: ResourceStatus) -> None:
        raise KeyError("colour")
    woken = (Key("Toy", "b"),)
    result = write_status(store, done(KEY, "lit", changed=True, wake=woken,
                                      report=Report("lit", broken)), "hash-1")
    assert (result.outcome, result.reason, result.changed, result.wake) == (
        Outcome.RETRY, "InternalError", True, woken)
    assert _conditions(store)["Ready"][:2] == ("Unknown", "InternalError")
    assert "KeyError: 'colour'" in _conditions(store)["Degraded"][2]
