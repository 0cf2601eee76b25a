"""Processes a run starts on its Host (the benchmark harness): named so that only they are
ever signalled, and ended as a group.

Why a name of pid *and* start time (``pid:<pid>:<start ticks>``): after a crash the recovery
finds the name in the run's inventory, and a pid alone may by then belong to anything; the
start time in ``/proc/<pid>/stat`` tells the process we started from one that reused its pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from controllers.waiting import until

KIND_PROCESS = "process"
TERM_GRACE_S = 10.0


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: no such process, or one that
    has exited and waits only to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after "(comm)", which may hold spaces
    try:
        return None if fields[0] == "Z" else int(fields[19])  # state; field 22: starttime
    except (IndexError, ValueError):
        return None


def name_of(proc: subprocess.Popen[bytes]) -> str:
    return f"pid:{proc.pid}:{start_ticks(proc.pid) or 0}"


def alive(name: str) -> int | None:
    """The pid of a recorded process still running as the same process, else None."""
    try:
        _, pid_text, ticks = name.split(":")
        pid = int(pid_text)
    except ValueError:
        return None
    now = start_ticks(pid)
    return pid if now is not None and str(now) == ticks else None


def end(name: str, interrupt_s: float = 0.0) -> str | None:
    """End a recorded process and its group: with ``interrupt_s``, one SIGINT first and that
    long to finish (the VSS harness cleans up what it started on its first SIGINT, and on
    nothing else; a second one would make it quit without cleaning), then SIGTERM, then SIGKILL
    after ``TERM_GRACE_S``. None when it is gone (or was never ours); otherwise why it is
    left."""
    pid = alive(name)
    if pid is None:
        return None
    steps = [(signal.SIGINT, interrupt_s)] if interrupt_s > 0 else []
    for sig, grace_s in [*steps, (signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, TERM_GRACE_S)]:
        try:
            os.killpg(pid, sig)  # started with its own session: its group is its pid
        except ProcessLookupError:
            return None
        except PermissionError as exc:
            return f"process {name}: cannot signal it: {exc.strerror}"
        if until(lambda: True if alive(name) is None else None, timeout_s=grace_s,
                 pace=0.2, stop=None) is not None:
            return None
    return f"process {name} did not end after SIGKILL"
