"""A broken save never deletes a fleet: the daemon against a real Docker engine.

Each case makes the watched folder say "these resources are gone" in a way a person did not
mean (an unreadable sub-folder, an emptied folder, a save caught half-written, a revision that
drops every Deployment) and checks that every container keeps running with the source Stalled
and a message naming the cause. The daemon runs without the DAC capabilities, so a folder
with mode 000 is unreadable to it even though the tests run as root.
"""

from __future__ import annotations

import shutil
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import docker
import pytest

from reconciler.daemon import EXIT_THREAD_DIED, Daemon, DaemonOptions
from reconciler.sources import FolderSource, folder_digest
from reconciler.supervisor import RestartPolicy
from state.store import Store
from tests.conftest import Cli
from tests.e2e.daemon_helpers import (
    DaemonProcess,
    condition,
    events_of,
    field_of,
    is_ready,
    running_ids,
    status_of,
    wait_for,
)
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

NO_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]
RESYNC_NEVER = "3600"


@pytest.fixture
def fleet(cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
          tmp_path: Path) -> Any:
    """A daemon converged on two Deployments (one file each), yielding (specs, daemon, ids)."""
    specs = tmp_path / "specs"
    write(specs, name="host.yaml")
    for name in ("a", "b"):
        write(specs, deployment(name, pinned(emulator_image), free_port()), name=f"{name}.yaml",
              host=False)
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC_NEVER],
                           tmp_path / "daemon.log", prefix=NO_DAC)
    daemon.wait_healthy()
    try:
        for name in ("a", "b"):
            wait_for(f"Deployment/{name} Ready", partial(is_ready, cli, f"Deployment/{name}"),
                     60)
        ids = sorted(running_ids(docker_client, instance))
        assert len(ids) == 2
        yield specs, daemon, ids
    finally:
        for path in specs.parent.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        assert daemon.terminate() == 0, daemon.log()


def _held(cli: Cli, reason: str) -> dict[str, Any] | None:
    cond = condition(status_of(cli, "Source/specs"), "Stalled")
    return cond if cond and cond["status"] == "True" and cond["reason"] == reason else None


def _settle(cli: Cli, specs: Path) -> None:
    """Save a harmless marker and wait until the daemon has loaded it: every change before it
    has been judged (one source thread reads revisions in order)."""
    (specs / "zz-marker.yaml").write_text(f"# marker {time.monotonic_ns()}\n")
    revision = folder_digest(specs)
    wait_for("the marker revision to be in force",
             lambda: (status_of(cli, "Source/specs") or {}).get("applied_revision") == revision,
             15)


def _nothing_deleted(cli: Cli) -> None:
    deleted = [e for e in events_of(cli) if e.reason == "Deleted"]
    assert deleted == [], deleted


def test_an_unreadable_subfolder_holds_the_revision(
        cli: Cli, instance: str, docker_client: docker.DockerClient, fleet: Any) -> None:
    specs, _, ids = fleet
    team = specs / "team-b"
    team.mkdir()
    (specs / "b.yaml").rename(team / "b.yaml")
    _settle(cli, specs)  # moved, still readable: nothing changes
    team.chmod(0)
    cond = wait_for("the source to hold the revision", lambda: _held(cli, "InvalidRevision"), 10)
    assert f"{team}: cannot read folder: Permission denied" in cond["message"]
    assert "keeping revision sha256:" in cond["message"]
    assert sorted(running_ids(docker_client, instance)) == ids
    team.chmod(0o755)
    _settle(cli, specs)
    assert sorted(running_ids(docker_client, instance)) == ids
    _nothing_deleted(cli)


def test_an_emptied_folder_holds_the_revision(
        cli: Cli, instance: str, docker_client: docker.DockerClient, fleet: Any) -> None:
    specs, _, ids = fleet
    old = specs.parent / "specs-old"
    specs.rename(old)
    specs.mkdir()  # `mv specs old; mkdir specs`
    cond = wait_for("the empty revision to be held", lambda: _held(cli, "EmptyRevision"), 10)
    assert "no resources while 2 are owned" in cond["message"]
    assert "Deployment/a, Deployment/b" in cond["message"]
    assert "--allow-empty" in cond["message"]
    assert sorted(running_ids(docker_client, instance)) == ids
    specs.rmdir()
    old.rename(specs)
    _settle(cli, specs)
    assert sorted(running_ids(docker_client, instance)) == ids
    _nothing_deleted(cli)


def test_a_save_truncated_for_0_3_s_or_stalled_is_never_acted_on(
        cli: Cli, instance: str, docker_client: docker.DockerClient, fleet: Any) -> None:
    specs, _, ids = fleet
    history = field_of(cli, "Deployment/a", "history")
    target = specs / "a.yaml"
    content = target.read_bytes()
    for stalled in (False, False, True):  # an editor that truncates, then writes (not atomic)
        with target.open("wb"):
            pass
        if stalled:  # the writer stalls past the quiet period: the empty file is held
            cond = wait_for("the emptied file to be held",
                            lambda: _held(cli, "InvalidRevision"), 10)
            assert f"{target}: emptied (0 bytes) while it declared Deployment/a" in cond["message"]
        else:
            time.sleep(0.3)  # the window is the point of the test: it is the fault injected
        target.write_bytes(content)
        _settle(cli, specs)
    assert sorted(running_ids(docker_client, instance)) == ids
    _nothing_deleted(cli)
    assert field_of(cli, "Deployment/a", "history") == history


def test_a_revision_that_prunes_everything_is_held_until_approved(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        fleet: Any) -> None:
    specs, _, ids = fleet
    created = [e["action"] for e in field_of(cli, "Deployment/a", "history")]
    (specs / "a.yaml").unlink()
    (specs / "b.yaml").unlink()
    cond = wait_for("the mass prune to be held", lambda: _held(cli, "MassPrune"), 10)
    assert "would delete 2 of 2 owned resources: Deployment/a, Deployment/b" in cond["message"]
    revision = folder_digest(specs)
    assert f"reconciler sync --approve-prune {revision}" in cond["message"]
    assert sorted(running_ids(docker_client, instance)) == ids
    assert cli("sync", "--approve-prune", "sha256:" + "0" * 64).returncode == 0  # not this one
    (specs / "zz-marker.yaml").write_text("# a new revision needs its own approval\n")
    marker = folder_digest(specs)
    wait_for("the marker revision to be held too",
             lambda: (status_of(cli, "Source/specs") or {}).get("facts", {}).get(
                 "rejectedRevision") == marker, 10)
    assert sorted(running_ids(docker_client, instance)) == ids

    approved = folder_digest(specs)
    approve = cli("sync", "--approve-prune", approved)
    assert approve.returncode == 0, approve.stderr
    wait_for("both pruned", lambda: not running_ids(docker_client, instance), 30)
    wait_for("records gone", lambda: status_of(cli, "Deployment/a") is None, 10)

    # Recreated under the same name, a resource keeps the history of its first life.
    write(specs, deployment("a", pinned(emulator_image), free_port()), name="a.yaml",
          host=False)
    wait_for("Deployment/a Ready again", lambda: is_ready(cli, "Deployment/a"), 60)
    history = [e["action"] for e in field_of(cli, "Deployment/a", "history")]
    assert history[:len(created)] == created
    assert "delete" in history
    assert history.index("delete") < len(history) - 1  # and the new life after it

    # The approval was used once: the very same content again is held again.
    (specs / "a.yaml").unlink()
    assert folder_digest(specs) == approved
    cond = wait_for("the same revision to be held again", lambda: _held(cli, "MassPrune"), 10)
    assert "would delete 1 of 1 owned resources: Deployment/a" in cond["message"]
    assert len(running_ids(docker_client, instance)) == 1


class _BrokenWatch(FolderSource):
    """A source whose watcher thread dies at once, every time (a bug we cannot trigger)."""

    def watch(self, stop: threading.Event, changed: Any) -> None:
        raise RuntimeError("watcher broke")


def test_a_dying_daemon_thread_makes_health_fail_and_ends_the_daemon(
        cli: Cli, tmp_path: Path) -> None:
    specs = tmp_path / "empty-specs"
    specs.mkdir()
    store = Store(cli.state_dir)
    options = DaemonOptions(metrics_address=None, workers=1,
                            restart_policy=RestartPolicy(restarts=2, base_s=1.0))
    daemon = Daemon(store, store.instance(cli.instance), _BrokenWatch(specs), options,
                    lambda _: None)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()), daemon=True)
    runner.start()
    try:
        def unhealthy() -> Any:
            done = cli("health", timeout=10)
            return done if done.returncode == 1 and '"ok": false' in done.stdout else None
        done = wait_for("health to report the dead thread", unhealthy, 20, 0.2)
        assert '"source": "restarting"' in done.stdout
        runner.join(timeout=30)
        assert result == [EXIT_THREAD_DIED]
        fatal = daemon.supervisor.fatal
        assert fatal is not None
        assert "thread source died 3 times" in fatal
        died = [e for e in events_of(cli) if e.reason == "ThreadDied"]
        assert len(died) == 3
        assert "watcher broke" in died[0].message
    finally:
        daemon.stop.set()
        runner.join(timeout=30)
        shutil.rmtree(specs, ignore_errors=True)
