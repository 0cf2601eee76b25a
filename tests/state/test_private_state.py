"""State files are private and never written through a planted link (issue 9, finding 6).

A symlink in place of ``events.jsonl``, ``reconciler.log``, ``lock`` or ``instance.json`` that
points at a file outside must be refused, not written, truncated or read through; an atomic
replace replaces the link itself; every file is created 0600; a state directory others can
write (or another user owns) is refused with the fix in the message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reconciler import logsetup as rlog
from state.atomic import write_atomic
from state.errors import CorruptState, StateError
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store
from tests.conftest import Cli

OUTSIDE_CONTENT = b"precious, not ours\n"  # no trailing-newline games: a torn tail would be cut
TORN_OUTSIDE = b'{"seq": 1, "torn'
NOBODY_UID = 65534


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside.txt"
    path.write_bytes(OUTSIDE_CONTENT)
    return path


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_event_log_link_is_refused_not_written_or_truncated(state_dir: Path,
                                                            tmp_path: Path) -> None:
    state_dir.mkdir(mode=0o700)
    torn = tmp_path / "torn.txt"
    torn.write_bytes(TORN_OUTSIDE)  # recovery would truncate a torn tail: not this one
    (state_dir / "events.jsonl").symlink_to(torn)
    store = Store(state_dir)
    with pytest.raises(StateError, match=r"events\.jsonl"):
        store.events.append(Key("Host", "local"), "Normal", "Planted", "must not land outside")
    with pytest.raises(CorruptState, match="symbolic link"):
        store.events.read()
    assert torn.read_bytes() == TORN_OUTSIDE


def test_log_lock_and_instance_links_are_refused(state_dir: Path, outside: Path) -> None:
    state_dir.mkdir(mode=0o700)
    for name in ("reconciler.log", "lock", "instance.json"):
        (state_dir / name).symlink_to(outside)
    with pytest.raises(StateError, match=r"reconciler\.log.*symbolic link"):
        rlog.configure(state_dir, verbose=False)
    store = Store(state_dir)
    with pytest.raises(StateError, match=r"lock.*symbolic link"):
        store.lock().acquire()
    with pytest.raises(CorruptState, match=r"instance\.json.*symbolic link"):
        store.instance(None)
    assert outside.read_bytes() == OUTSIDE_CONTENT


def test_atomic_replace_replaces_a_link_not_its_target(state_dir: Path, outside: Path) -> None:
    state_dir.mkdir(mode=0o700)
    link = state_dir / "status.json"
    link.symlink_to(outside)
    write_atomic(link, b"new\n")
    assert not link.is_symlink()
    assert link.read_bytes() == b"new\n"
    assert outside.read_bytes() == OUTSIDE_CONTENT
    assert _mode(link) == 0o600


def test_cli_refuses_planted_links_and_leaves_their_targets(cli: Cli, state_dir: Path,
                                                            outside: Path) -> None:
    state_dir.mkdir(mode=0o700)
    (state_dir / "reconciler.log").symlink_to(outside)
    (state_dir / "events.jsonl").symlink_to(outside)
    done = cli("delete", "vlm")
    assert done.returncode == 1
    assert f"{state_dir / 'reconciler.log'}" in done.stderr
    assert "symbolic link" in done.stderr
    assert outside.read_bytes() == OUTSIDE_CONTENT


def test_every_state_file_is_created_0600(cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    state_dir.mkdir(mode=0o700)
    (state_dir / "reconciler.log").write_text("")
    os.chmod(state_dir / "reconciler.log", 0o644)  # as older versions created it
    store = Store(state_dir)
    store.save(ResourceStatus(resource="Host/local", kind="Host", name="local"))
    store.events.append(Key("Host", "local"), "Normal", "Seen", "x")
    assert cli("delete", "vlm").returncode == 0  # takes the lock, writes the log
    for name in ("reconciler.log", "events.jsonl", "lock", "instance.json",
                 "resources/Host/local.json"):
        assert _mode(state_dir / name) == 0o600, name
    for name in (".", "resources", "resources/Host"):
        assert _mode(state_dir / name) == 0o700, name


@pytest.mark.parametrize("args", [("status",), ("events",), ("delete", "vlm")])
def test_a_state_dir_others_can_write_is_refused(cli: Cli, state_dir: Path,
                                                 args: tuple[str, ...]) -> None:
    state_dir.mkdir()
    os.chmod(state_dir, 0o777)
    done = cli(*args)
    assert done.returncode == 1
    assert f"chmod 700 {state_dir}" in done.stderr
    assert "writable by group or others" in (
        done.stderr)
    assert not (state_dir / "reconciler.log").exists()


def test_a_state_dir_of_another_user_is_refused(cli: Cli, state_dir: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test plants another user's directory and needs root (the suite "
                    "runs as root)")
    state_dir.mkdir(mode=0o700)
    os.chown(state_dir, NOBODY_UID, NOBODY_UID)
    done = cli("status")
    assert done.returncode == 1
    assert f"{state_dir} is owned by uid {NOBODY_UID}" in done.stderr
