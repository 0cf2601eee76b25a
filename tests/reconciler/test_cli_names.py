"""A bare NAME means a resource of any kind: ``status``, ``events`` and ``delete`` look it up
in what is recorded (the CLI names no kind), and a NAME that two kinds share is refused with
both keys, never guessed."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from click.testing import Result as ClickResult

from reconciler.cli import main
from state.keys import Key
from state.models import ResourceStatus
from state.store import Store


def _cli(state: Path, *args: str) -> ClickResult:
    env = {"RECONCILER_STATE_DIR": str(state), "RECONCILER_INSTANCE": "names", "COLUMNS": "200"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _store(tmp_path: Path, *keys: Key) -> Path:
    state = tmp_path / "state"
    store = Store(state)
    for key in keys:
        store.save(ResourceStatus(resource=key, kind=key.kind, name=key.name))
        store.events.append(key, "Normal", "Seen", f"{key} seen")
    return state


def test_a_bare_name_finds_its_resource_whatever_its_kind(tmp_path: Path) -> None:
    state = _store(tmp_path, Key("StreamSet", "cams"), Key("Deployment", "vlm"))
    shown = _cli(state, "status", "cams", "-o", "json")
    assert shown.exit_code == 0, shown.output
    assert '"resource": "StreamSet/cams"' in shown.output
    assert "Deployment/vlm" not in shown.output
    events = _cli(state, "events", "cams")
    assert events.exit_code == 0, events.output
    assert "StreamSet/cams seen" in events.output
    assert "Deployment/vlm" not in events.output


def test_a_name_two_kinds_share_is_refused_naming_both(tmp_path: Path) -> None:
    state = _store(tmp_path, Key("StreamSet", "a"), Key("Deployment", "a"))
    shown = _cli(state, "status", "a")
    assert shown.exit_code == 1
    assert "Deployment/a" in shown.output
    assert "StreamSet/a" in shown.output
    assert "KIND/NAME" in shown.output
    deleted = _cli(state, "delete", "a")
    assert deleted.exit_code == 1
    assert "nothing was deleted" in deleted.output
    assert Store(state).load(Key("Deployment", "a")) is not None
    assert Store(state).load(Key("StreamSet", "a")) is not None
    assert _cli(state, "status", "Deployment/a").exit_code == 0  # KIND/NAME says which


def test_deleting_a_name_nothing_records_deletes_nothing(tmp_path: Path) -> None:
    state = _store(tmp_path, Key("Deployment", "vlm"))
    done = _cli(state, "delete", "other")
    assert done.exit_code == 0, done.output
    assert "other: nothing recorded; nothing to delete" in done.output
    assert Store(state).load(Key("Deployment", "vlm")) is not None
