"""The event log: sequence numbers, filters, torn-line tolerance and following."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from state import Event, EventLog, Redactor, append_line_durable

WAIT_S = 10.0
"""Upper bound for a follow() step; a hang means a bug, not a slow machine."""


def _log(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "state" / "events.jsonl", Redactor())


def _next_within(events: Iterator[Event], timeout: float = WAIT_S) -> Event:
    """next(events), failing instead of hanging if nothing arrives."""
    box: queue.Queue[Event | BaseException] = queue.Queue()

    def pull() -> None:
        try:
            box.put(next(events))
        except BaseException as exc:
            box.put(exc)

    threading.Thread(target=pull, daemon=True).start()
    try:
        got = box.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"follow() yielded nothing within {timeout}s")
    if isinstance(got, BaseException):
        raise got
    return got


def test_append_and_read_with_filters(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert log.read() == []
    for i in range(5):
        resource = "Host/h" if i % 2 else "Deployment/d"
        event = log.append(resource, "Normal", "Tick", f"tick {i}")
        assert event.seq == i + 1
    assert [e.seq for e in log.read()] == [1, 2, 3, 4, 5]
    assert [e.message for e in log.read("Host/h")] == ["tick 1", "tick 3"]
    assert [e.seq for e in log.read(since_seq=3)] == [4, 5]
    assert [e.seq for e in log.read(limit=2)] == [4, 5]
    assert log.read(limit=0) == []
    assert [e.seq for e in log.read("Deployment/d", since_seq=1, limit=1)] == [5]


def test_seq_continues_in_a_fresh_log(tmp_path: Path) -> None:
    _log(tmp_path).append("Host/h", "Normal", "A", "a")
    _log(tmp_path).append("Host/h", "Warning", "B", "b")
    assert [(e.seq, e.type) for e in _log(tmp_path).read()] == [(1, "Normal"), (2, "Warning")]


def test_message_with_newline_stays_one_line(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append("Host/h", "Warning", "Multi", "line one\nline two")
    assert log.path.read_bytes().count(b"\n") == 1
    assert log.read()[0].message == "line one\nline two"


def test_torn_last_line_is_skipped_then_cut(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append("Host/h", "Normal", "A", "a")
    log.append("Host/h", "Normal", "B", "b")
    with open(log.path, "ab") as handle:
        handle.write(b'{"seq": 3, "time": "2026-')  # what a crash mid-write leaves
    assert [e.seq for e in _log(tmp_path).read()] == [1, 2]
    fresh = _log(tmp_path)
    assert fresh.append("Host/h", "Normal", "C", "c").seq == 3
    assert [e.reason for e in fresh.read()] == ["A", "B", "C"]
    assert all(line.startswith(b"{") for line in fresh.path.read_bytes().splitlines())


def test_garbage_lines_are_skipped(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append("Host/h", "Normal", "A", "a")
    append_line_durable(log.path, "not json at all")
    append_line_durable(log.path, '{"seq": "x"}')
    with open(log.path, "ab") as handle:
        handle.write(b"\xff\xfe\x00\n\n")
    log.append("Host/h", "Normal", "B", "b")
    assert [(e.seq, e.reason) for e in _log(tmp_path).read()] == [(1, "A"), (2, "B")]


def test_append_line_refuses_newlines(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must not contain a newline"):
        append_line_durable(tmp_path / "x", "a\nb")


def test_concurrent_appends_get_unique_seqs(tmp_path: Path) -> None:
    log = _log(tmp_path)
    threads = [
        threading.Thread(
            target=lambda t=t: [log.append("Host/h", "Normal", "T", f"{t}") for _ in range(20)]
        )
        for t in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [e.seq for e in _log(tmp_path).read()] == list(range(1, 161))


def test_follow_yields_existing_then_new_and_never_half_lines(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append("Host/h", "Normal", "A", "a")
    log.append("Deployment/d", "Normal", "X", "other resource")
    events = log.follow("Host/h", poll_s=0.01)
    assert _next_within(events).reason == "A"

    # Another process appends while we wait: follow must pick it up.
    script = (
        "import sys; from pathlib import Path; from state import EventLog, Redactor; "
        "EventLog(Path(sys.argv[1]), Redactor()).append('Host/h', 'Warning', 'B', 'b')"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(log.path)])
    got = _next_within(events)
    assert child.wait(timeout=WAIT_S) == 0
    assert (got.seq, got.reason, got.type) == (3, "B", "Warning")

    # A line in flight is not yielded until it is complete: the generator reads event 4 and
    # the first half of event 5 in one chunk, yields 4, and must hold the half back.
    four, five = (
        Event(
            seq=seq,
            time="2026-12-02T18:00:00.000Z",
            resource="Host/h",
            type="Normal",
            reason=reason,
            message=reason.lower(),
        )
        .model_dump_json()
        .encode()
        for seq, reason in ((4, "C"), (5, "D"))
    )
    with open(log.path, "ab") as handle:
        handle.write(four + b"\n" + five[:10])
    assert _next_within(events).seq == 4
    with open(log.path, "ab") as handle:
        handle.write(five[10:] + b"\n")
    got = _next_within(events)
    assert (got.seq, got.reason) == (5, "D")
    events.close()


def test_follow_is_woken_by_an_append_not_by_its_poll(tmp_path: Path) -> None:
    """`events -f` shows a new event as it is written: the folder is watched (inotify), the
    poll (a minute here) is only the backstop for a change the watch cannot see."""
    log = _log(tmp_path)
    log.append("Host/h", "Normal", "A", "a")
    events = log.follow(poll_s=60.0)
    assert _next_within(events).reason == "A"
    for reason in ("B", "C"):
        log.append("Host/h", "Normal", reason, reason.lower())
        assert _next_within(events, timeout=5.0).reason == reason
    events.close()


def test_follow_since_seq(tmp_path: Path) -> None:
    log = _log(tmp_path)
    for name in "ABC":
        log.append("Host/h", "Normal", name, "")
    events = log.follow(since_seq=2, poll_s=0.01)
    assert _next_within(events).reason == "C"
    events.close()


def test_the_log_rotates_at_its_size_limit_and_reads_as_one(tmp_path: Path) -> None:
    path = tmp_path / "state" / "events.jsonl"
    log = EventLog(path, Redactor(), max_bytes=600, keep=2)
    for n in range(40):
        log.append("Deployment/a", "Normal", "Step", f"step {n:02d}")
    rotated = sorted(p.name for p in path.parent.iterdir())
    assert rotated == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]  # .3 was dropped
    assert all(p.stat().st_size <= 600 for p in path.parent.iterdir())
    events = log.read()
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)
    assert seqs[-1] == 40
    assert len(seqs) < 40
    assert [e.seq for e in log.read(limit=3)] == [38, 39, 40]
    # A new writer (a restart) numbers on from the files, even with no current file.
    assert EventLog(path, Redactor(), max_bytes=600, keep=2).append(
        "Deployment/a", "Normal", "Step", "after").seq == 41
    path.unlink()
    newest_rotated = max(e.seq for e in log.read())
    assert EventLog(path, Redactor(), max_bytes=600, keep=2).append(
        "Deployment/a", "Normal", "Step", "again").seq == newest_rotated + 1


def test_follow_crosses_a_rotation_without_losing_an_event(tmp_path: Path) -> None:
    path = tmp_path / "state" / "events.jsonl"
    log = EventLog(path, Redactor(), max_bytes=500, keep=4)  # room for all 13
    log.append("Deployment/a", "Normal", "Step", "first")
    follower = log.follow(poll_s=0.01)
    assert next(follower).message == "first"
    for n in range(12):
        log.append("Deployment/a", "Normal", "Step", f"step {n}")
    assert len(list(path.parent.glob("events.jsonl.*"))) >= 2  # it rotated more than once
    seen = [next(follower).message for _ in range(12)]
    assert seen == [f"step {n}" for n in range(12)]
    follower.close()
