"""Thread supervision: deaths are reported, restarted, and only recent ones count."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import structlog
import tenacity

from reconciler.logsetup import tee
from reconciler.supervisor import RestartPolicy, StopAfterRecentDeaths, Supervisor
from state.diskhealth import WRITES
from tests.e2e.daemon_helpers import wait_for


def _state() -> tenacity.RetryCallState:
    return tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})


def test_only_deaths_within_the_window_count() -> None:
    now = [0.0]
    stop = StopAfterRecentDeaths(limit=2, window_s=60.0, clock=lambda: now[0])
    verdicts = []
    for at in (0.0, 100.0, 200.0, 300.0):  # one death every 100 s: always forgiven
        now[0] = at
        verdicts.append(stop(_state()))
    assert verdicts == [False] * 4
    now[0] = 310.0
    assert stop(_state()) is False  # two within 60 s
    now[0] = 320.0
    assert stop(_state()) is True  # three within 60 s: beyond repair


def test_a_thread_that_keeps_dying_ends_the_daemon_and_one_that_recovers_does_not() -> None:
    stop = threading.Event()
    recorded: list[tuple[str, str]] = []
    supervisor = Supervisor(stop, RestartPolicy(restarts=2, base_s=0.01, max_s=0.01),
                            lambda name, why: recorded.append((name, why)))
    runs = {"flaky": 0}

    def flaky() -> None:
        runs["flaky"] += 1
        if runs["flaky"] == 1:
            raise RuntimeError("first run fails")
        stop.wait()  # then serves until the daemon stops

    def broken() -> None:
        raise RuntimeError("always fails")

    supervisor.spawn("flaky", flaky)
    wait_for("flaky to be restarted", lambda: runs["flaky"] == 2, 10, 0.01)
    assert supervisor.healthy()
    assert supervisor.states["flaky"] == "running"
    supervisor.spawn("broken", broken)
    wait_for("the daemon to be stopped", stop.is_set, 10, 0.01)
    assert supervisor.fatal is not None
    assert "thread broken died 3 times" in supervisor.fatal
    assert not supervisor.healthy()
    assert supervisor.states["broken"] == "dead"
    assert recorded[0] == ("flaky", "RuntimeError: first run fails")
    assert [name for name, _ in recorded].count("broken") == 3
    supervisor.join(deadline=0)


def test_a_death_that_cannot_be_logged_is_still_restarted_and_reported() -> None:
    """Issue 26: with the state disk full, logging a thread's death failed, the error escaped
    the supervisor and the thread was gone for good while health said ok. The log is a real
    device that refuses every write (/dev/full)."""
    full = Path("/dev/full").open("w", encoding="utf-8")  # noqa: SIM115 (closed below)
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(
        file=tee([full], log_file=full)))  # type: ignore[arg-type]
    stop = threading.Event()
    deaths: list[str] = []
    supervisor = Supervisor(stop, RestartPolicy(restarts=3, base_s=0.01, max_s=0.01),
                            lambda name, why: deaths.append(why))
    runs = [0]

    def dies_once() -> None:
        runs[0] += 1
        if runs[0] == 1:
            raise RuntimeError("boom")
        stop.wait()

    try:
        supervisor.spawn("dies-once", dies_once)
        wait_for("the restart", lambda: runs[0] == 2 or None, 10)
        assert deaths == ["RuntimeError: boom"]
        assert supervisor.healthy()
        failing = WRITES.failing
        assert failing is not None
        assert "No space left on device" in failing.reason
    finally:
        stop.set()
        supervisor.join(time.monotonic() + 5)
        WRITES.succeeded()
        structlog.reset_defaults()
        with contextlib.suppress(OSError):  # its buffer still holds what it refused
            full.close()
    assert WRITES.failing is None


def test_deaths_from_a_full_disk_never_end_the_daemon() -> None:
    """A thread that cannot write the state disk dies each time it tries: restarting the
    whole process mends nothing, so those deaths are not counted toward ending it (health
    fails meanwhile); once writes succeed the thread runs on."""
    stop = threading.Event()
    supervisor = Supervisor(stop, RestartPolicy(restarts=2, base_s=0.01, max_s=0.01),
                            lambda name, why: None)
    runs = [0]

    def writes_to_a_full_disk() -> None:
        runs[0] += 1
        if runs[0] <= 6:  # three times the restarts allowed
            with Path("/dev/full").open("wb", buffering=0) as full:
                full.write(b"status")  # OSError: No space left on device
        stop.wait()

    try:
        supervisor.spawn("writer", writes_to_a_full_disk)
        wait_for("the disk to take writes again", lambda: runs[0] == 7 or None, 10)
        assert supervisor.fatal is None
        assert not stop.is_set()
        assert supervisor.deaths["writer"] == 6
        assert supervisor.healthy()
    finally:
        stop.set()
        supervisor.join(time.monotonic() + 5)


def test_a_thread_that_meets_a_held_state_directory_waits_instead_of_dying(
        tmp_path: Path) -> None:
    """Issue 38: while the state directory takes no writes, a thread whose write fails is
    held (no death, no traceback, no restart loop) and runs again once writes return."""
    from state.atomic import write_atomic
    from state.errors import StateError

    stop = threading.Event()
    deaths: list[str] = []
    supervisor = Supervisor(stop, RestartPolicy(restarts=1, base_s=0.01, max_s=0.01),
                            lambda name, why: deaths.append(why))
    runs = [0]

    def recorder() -> None:
        runs[0] += 1
        if runs[0] == 1:
            raise StateError("cannot write state file x.json: Read-only file system")
        stop.wait()

    root, WRITES.root = WRITES.root, tmp_path  # this folder is the state directory here
    WRITES.failed("x.json", OSError(30, "Read-only file system"))
    try:
        supervisor.spawn("recorder", recorder)
        wait_for("the thread to be held", lambda: supervisor.states["recorder"].startswith(
            "held") or None, 10, 0.01)
        assert runs[0] == 1
        assert deaths == []
        assert supervisor.healthy()  # its state is the directory's, which health names
        write_atomic(tmp_path / "probe", b"ok")  # a write succeeds: the directory is back
        wait_for("the thread to run again", lambda: runs[0] == 2 or None, 10, 0.01)
        assert supervisor.states["recorder"] == "running"
        assert deaths == []
        assert supervisor.deaths == {}
    finally:
        WRITES.succeeded()
        WRITES.root = root
        stop.set()
        supervisor.join(time.monotonic() + 5)
