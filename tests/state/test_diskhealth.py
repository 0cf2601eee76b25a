"""Only the state directory's own writes speak for its disk (issue 26 review): evidence
written to another disk neither marks it failing nor clears it."""

from __future__ import annotations

import errno
from pathlib import Path

from state.atomic import write_atomic
from state.diskhealth import WRITES


def test_writes_elsewhere_neither_mark_nor_clear_the_state_disk(tmp_path: Path) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "evidence"
    state.mkdir()
    elsewhere.mkdir()
    WRITES.root = state
    try:
        WRITES.failed("status.json", OSError(errno.ENOSPC, "No space left on device"))
        write_atomic(elsewhere / "manifest.json", b"{}")  # another disk: says nothing
        assert WRITES.failing is not None
        write_atomic(state / "status.json", b"{}")  # the state disk takes writes again
        assert WRITES.failing is None
    finally:
        WRITES.root = None
        WRITES.succeeded()
