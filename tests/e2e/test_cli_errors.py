"""Mistakes at the command line get a clear message and exit 1, and change nothing."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli


def test_missing_spec_file_is_named_without_a_fake_position(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    done = cli("validate", str(missing))
    assert done.returncode == 1
    assert f"{missing}: no such file or folder" in done.stderr
    assert ":0:0" not in done.stderr


def test_delete_of_a_mistyped_path_fails_and_deletes_nothing(cli: Cli, tmp_path: Path) -> None:
    for target in ("specs/quickstrat/", str(tmp_path / "gone.yaml"), "Deploymnet/vlm"):
        done = cli("delete", target)
        assert done.returncode == 1, (target, done.stdout, done.stderr)
        assert target in done.stderr
        assert "nothing was deleted" in done.stderr
    assert not (cli.state_dir / "events.jsonl").exists() or "Deleted" not in (
        cli.state_dir / "events.jsonl").read_text()


def test_apply_timeout_must_be_positive(cli: Cli, tmp_path: Path) -> None:
    done = cli("apply", "--timeout", "0", str(tmp_path))
    assert done.returncode == 2
    assert "--timeout" in done.stderr
