"""The single-writer lock against a real second process, including recovery after kill -9."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from state import LockHeld, StateError, StateLock, Store

HOLDER = """
import sys
from pathlib import Path
from state import StateLock
lock = StateLock(Path(sys.argv[1]))
lock.acquire()
print("locked", flush=True)
sys.stdin.read()  # hold until killed or stdin closes
"""


def test_lock_held_by_other_process_then_recovered_after_kill9(tmp_path: Path) -> None:
    root = tmp_path / "state"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeld) as err:
            StateLock(root).acquire()
        assert err.value.pid == holder.pid
        assert err.value.since is not None
        assert err.value.since.endswith("Z")
        assert err.value.path == root
        assert f"locked by reconciler pid {holder.pid}" in str(err.value)
        assert "another apply or daemon is running" in str(err.value)
        with pytest.raises(LockHeld):
            Store(root).lock().acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert holder.returncode == -signal.SIGKILL

    # The holder's pid is still written in the file, but the kernel dropped its flock.
    lock = StateLock(root)
    lock.acquire()
    try:
        assert lock.held
        info = json.loads((root / "lock").read_text())
        assert info["pid"] != holder.pid
    finally:
        lock.release()
    assert not lock.held


def test_lock_excludes_within_one_process_and_releases(tmp_path: Path) -> None:
    root = tmp_path / "state"
    with StateLock(root) as first:
        assert first.held
        with pytest.raises(LockHeld):
            StateLock(root).acquire()
        with pytest.raises(StateError):
            first.acquire()
    assert not first.held
    second = StateLock(root)
    second.acquire()
    second.release()
    second.release()  # idempotent
    assert (root / "lock").read_bytes() == b""  # no stale holder info left behind
