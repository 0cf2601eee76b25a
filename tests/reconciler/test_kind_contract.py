"""One contract for every kind: a toy kind, registered only here, goes through the CLI, the
engine and the daemon without any of them knowing it (tests/reconciler/toy_kinds.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from click.testing import Result as ClickResult

from reconciler.cli import main
from reconciler.daemon import Daemon, DaemonOptions
from reconciler.sources import FolderSource, folder_digest
from state.keys import Key
from state.store import Store
from tests.e2e.daemon_helpers import wait_for
from tests.reconciler.toy_kinds import toy_kinds, toy_specs


def _cli(state: Path, *args: str) -> ClickResult:
    env = {"RECONCILER_STATE_DIR": str(state), "RECONCILER_INSTANCE": "toy", "COLUMNS": "200"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_a_toy_kind_is_planned_applied_and_deleted_by_the_cli(tmp_path: Path) -> None:
    world, specs, state = tmp_path / "world", tmp_path / "specs", tmp_path / "state"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs())
    with toy_kinds(world):
        plan = _cli(state, "plan", str(specs))
        assert plan.exit_code == 2, plan.output
        assert plan.output.index("Switch/hall: create") < plan.output.index("Lamp/desk: create")
        assert "because colour amber" in plan.output

        failed = _cli(state, "apply", str(specs))  # the Switch has no power: the Lamp waits
        assert failed.exit_code == 1, failed.output
        assert "✗ Switch/hall: no power yet" in failed.output
        assert "✗ Lamp/desk: waiting for Switch/hall to be Ready" in failed.output
        assert not (world / "lamp-desk").exists()

        (world / "power").touch()
        applied = _cli(state, "apply", str(specs))
        assert applied.exit_code == 0, applied.output
        assert (world / "lamp-desk").read_text() == "amber"
        assert _cli(state, "plan", str(specs)).exit_code == 0  # in sync

        deleted = _cli(state, "delete", str(specs))  # the Lamp's delete asserts it goes first
        assert deleted.exit_code == 0, deleted.output
        assert deleted.output.index("Lamp/desk") < deleted.output.index("Switch/hall")
        assert not (world / "lamp-desk").exists()
        assert not (world / "switch-hall").exists()


def test_an_exception_no_kind_expected_is_a_reported_failure_not_a_traceback(
        tmp_path: Path) -> None:
    world, specs, state = tmp_path / "world", tmp_path / "specs", tmp_path / "state"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs(colour="boom"))
    with toy_kinds(world):
        (world / "power").touch()
        applied = _cli(state, "apply", str(specs))
        assert applied.exit_code == 1
        assert "✗ Lamp/desk: InternalError: RuntimeError: the bulb exploded" in applied.output
        assert "Traceback" not in applied.output
        status = _cli(state, "status", "Lamp/desk")
        assert "the bulb exploded" in status.output


class _Running:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.result: list[int] = []
        self.thread = threading.Thread(target=lambda: self.result.append(daemon.run()),
                                       daemon=True)

    def __enter__(self) -> _Running:
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.daemon.stop.set()
        self.thread.join(timeout=30)
        assert self.result == [0]


def _daemon(tmp_path: Path, specs: Path) -> Daemon:
    store = Store(tmp_path / "state")
    options = DaemonOptions(metrics_address=None, workers=2, resync_s=3600,
                            base_backoff_s=0.1, max_backoff_s=0.3)
    return Daemon(store, store.instance("toy"), FolderSource(specs, quiet_s=0.1), options,
                  lambda _: None)


def _record(daemon: Daemon, key: str) -> Any:
    return daemon.store.load(Key.parse(key))


def _lit(daemon: Daemon, key: str) -> Any:
    """The record once the kind has called it Ready (its world file is written just before)."""
    record = daemon.store.load(Key.parse(key))
    ready = record.condition("Ready") if record is not None else None
    return record if ready is not None and ready.status == "True" else None


def test_the_daemon_orders_wakes_and_prunes_a_toy_kind(tmp_path: Path) -> None:
    world, specs = tmp_path / "world", tmp_path / "specs"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs())
    with toy_kinds(world):
        daemon = _daemon(tmp_path, specs)
        with _Running(daemon):
            # The Switch fails (no power) and is retried with backoff; the Lamp waits for it
            # and is never retried on its own (resync is an hour away).
            wait_for("the Switch to be retried", lambda: [
                e for e in daemon.store.events.read(Key("Switch", "hall"))
                if e.reason == "Backoff"][1:],
                     10)
            assert not (world / "lamp-desk").exists()
            (world / "power").touch()
            # Only the Switch's success can wake the Lamp now.
            lamp = wait_for("the Lamp to be lit", lambda: _lit(daemon, "Lamp/desk"), 10)
            assert (world / "lamp-desk").read_text() == "amber"
            assert lamp.applied_revision == folder_digest(specs)

            (specs / "toys.yaml").write_text(toy_specs().split("---")[0])  # the Lamp goes
            wait_for("the Lamp to be pruned", lambda: _record(daemon, "Lamp/desk") is None, 10)
            assert not (world / "lamp-desk").exists()
            assert (world / "switch-hall").exists()


def test_a_pass_records_the_revision_it_started_from(tmp_path: Path) -> None:
    world, specs = tmp_path / "world", tmp_path / "specs"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs())
    world.mkdir()
    (world / "power").touch()
    (world / "hold-desk").touch()  # the Lamp's pass stops mid-way until this goes
    with toy_kinds(world):
        daemon = _daemon(tmp_path, specs)
        with _Running(daemon):
            wait_for("the Switch", lambda: _record(daemon, "Switch/hall"), 10)
            first = folder_digest(specs)
            (specs / "more.yaml").write_text(toy_specs(switch="porch", lamp="door"))
            second = folder_digest(specs)
            wait_for("revision B in force", lambda: daemon.snapshot is not None
                     and daemon.snapshot.revision == second, 10)
            (world / "hold-desk").unlink()
            lamp = wait_for("the Lamp lit", lambda: _lit(daemon, "Lamp/desk"), 10)
            assert lamp.applied_revision == first
            door = wait_for("the second Lamp lit", lambda: _lit(daemon, "Lamp/door"), 10)
            assert door.applied_revision == second


def test_an_exception_in_the_daemon_is_a_reported_failure_and_the_worker_lives_on(
        tmp_path: Path) -> None:
    world, specs = tmp_path / "world", tmp_path / "specs"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs(colour="boom"))
    with toy_kinds(world):
        (world / "power").touch()
        daemon = _daemon(tmp_path, specs)
        with _Running(daemon):
            def failed() -> Any:
                record = _record(daemon, "Lamp/desk")
                ready = record.condition("Ready") if record is not None else None
                return ready if ready is not None and ready.reason == "InternalError" else None
            ready = wait_for("the failure recorded", failed, 10)
            assert "RuntimeError: the bulb exploded" in ready.message
            assert daemon.healthy()  # no thread died
            (specs / "toys.yaml").write_text(toy_specs(colour="amber"))  # the same workers
            lamp = wait_for("the Lamp lit after the fix", lambda: _lit(daemon, "Lamp/desk"), 10)
            assert lamp is not None
            assert (world / "lamp-desk").read_text() == "amber"


def test_a_toy_kinds_own_watch_worker_and_part_run_in_the_daemon(tmp_path: Path) -> None:
    """The Switch kind's watch repairs a switch turned off by hand at once (resync is an hour
    away, so nothing else wakes it); the Lamp kind's worker meters the lamps while the daemon
    runs and ends with it; its part is closed when the daemon stops. The daemon names none
    of them: each kind starts its own (``Kind.background``)."""
    world, specs = tmp_path / "world", tmp_path / "specs"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs())
    world.mkdir()
    (world / "power").touch()
    with toy_kinds(world):
        daemon = _daemon(tmp_path, specs)
        with _Running(daemon):
            wait_for("the Lamp lit", lambda: _lit(daemon, "Lamp/desk"), 10)
            wait_for("the meter to read one lamp",
                     lambda: (world / "meter").exists() and (world / "meter").read_text() == "1",
                     10)
            (world / "switch-hall").unlink()  # flipped off by hand
            wait_for("the watch to wake the Switch and the Switch to repair itself",
                     lambda: (world / "switch-hall").exists(), 10)
            assert {"switch-watch", "lamp-meter"} <= set(daemon.supervisor.states)
            assert daemon.describe()["threads"] == {}  # every thread runs
            assert not (world / "meter-closed").exists()
        assert (world / "meter").read_text() == "stopped"  # the worker ended with the daemon
        assert (world / "meter-closed").exists()  # and its part was closed


def test_a_toy_kinds_declared_reference_is_checked_by_the_loader(tmp_path: Path) -> None:
    """The Lamp declares its reference to a Switch once (``specs.kinds.Reference``): the
    loader refuses a Lamp naming a Switch the set lacks, with the file, line and rule."""
    world, specs, state = tmp_path / "world", tmp_path / "specs", tmp_path / "state"
    specs.mkdir()
    (specs / "toys.yaml").write_text(toy_specs().split("---")[1])  # the Lamp alone
    with toy_kinds(world):
        done = _cli(state, "validate", str(specs))
        assert done.exit_code == 1
        assert ("Switch 'hall' is not defined (the Switch names in this spec set: none)"
                in done.output)
        assert "toys.yaml:" in done.output
        assert "references name an existing resource" in done.output
    unknown = _cli(state, "validate", str(specs))  # unregistered: an unknown kind again
    assert unknown.exit_code == 1
    assert "unknown kind 'Lamp'" in unknown.output
