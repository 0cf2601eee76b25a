"""Faults of the machine under a running daemon (issue 26): a full state disk, a read-only
one, SIGSTOP/SIGCONT. The daemon stays alive and says so, keeps what runs, and acts again by
itself once the fault is gone, a save that arrived meanwhile included.

The state directory is a real 4 MiB tmpfs, filled with a real file until the kernel says
ENOSPC (mounting needs root, as CI runs).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from tests.conftest import Cli
from tests.e2e.daemon_helpers import DaemonProcess, is_ready, picture, running_ids, wait_for
from tests.ports import free_port
from tests.specs_factory import deployment, pinned, write

RESYNC_NEVER = "3600"  # recovery must not wait for (or be rescued by) the periodic resync


@pytest.fixture
def small_state_disk(state_dir: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    state_dir.mkdir(mode=0o700, parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs",
                    str(state_dir)], check=True)
    try:
        yield state_dir
    finally:  # a read-only mount a failed test left on top, then the tmpfs itself
        for _ in range(3):
            if subprocess.run(["umount", "-l", str(state_dir)], check=False,
                              capture_output=True).returncode != 0:
                break


def _fill(folder: Path) -> Path:
    """A file that takes every free byte of ``folder``'s filesystem."""
    filler = folder / "filler"
    with filler.open("wb") as handle:
        chunk = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                handle.write(chunk)
                handle.flush()
    with pytest.raises(OSError, match="No space left") as full:  # full for anyone
        (folder / "probe").write_bytes(b"x" * 65536)
    assert full.value.errno == errno.ENOSPC
    return filler


def _env_of(client: docker.DockerClient, container_id: str) -> list[str]:
    return list(client.containers.get(container_id).attrs["Config"]["Env"])


def _full(folder: Path) -> Callable[[], None]:
    return _fill(folder).unlink


def _read_only(folder: Path) -> Callable[[], None]:
    """A read-only mount laid over the state directory (remounting the tmpfs itself read-only
    is refused while the daemon holds files open for writing): every new write through the
    path fails with EROFS. Unmounting it is the recovery."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)

    def repair() -> None:
        subprocess.run(["umount", str(folder)], check=True)
    return repair


FAULTS = {"full": (_full, "No space left on device"),
          "read-only": (_read_only, "Read-only file system")}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_full_or_read_only_state_disk_is_visible_and_recovers_by_itself(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        small_state_disk: Path, tmp_path: Path, fault: str) -> None:
    break_disk, reason = FAULTS[fault]
    specs = tmp_path / "specs"
    port = free_port()
    write(specs, deployment("vlm", pinned(emulator_image), port, env={"RUN": "one"}))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC_NEVER],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 60)
        [before] = running_ids(docker_client, instance)

        repair = break_disk(small_state_disk)
        # A save while nothing can be recorded: its pass cannot write its inventory ahead of
        # acting, so it does not act; the running service stays.
        write(specs, deployment("vlm", pinned(emulator_image), port, env={"RUN": "two"}))
        health = wait_for("health to fail with the disk's reason", lambda: (
            h if (h := cli("health")).returncode == 1 and "stateWrites" in h.stdout
            else None), 30)
        assert reason in health.stdout
        status = cli("status")
        assert status.returncode == 1
        assert "cannot write" in status.stderr
        assert reason in status.stderr
        assert running_ids(docker_client, instance) == [before]
        time.sleep(10)  # a while longer: no thread dies, nothing else changes
        assert daemon.proc.poll() is None
        held = cli("health")
        assert held.returncode == 1
        said = json.loads(held.stdout)
        # Issue 38: the workers and watchers died and were restarted in a loop (12 deaths in
        # 30 s), and a 90 s spell ended the daemon. Now they are held, and nothing dies.
        assert said["threadDeaths"] == 0, said
        assert set(said["threads"].values()) <= {"held: the state directory takes no writes"}
        assert said["stateWrites"]["directory"] == str(small_state_disk)
        assert running_ids(docker_client, instance) == [before]
        assert daemon.log().count("takes no writes") == 1  # said once, not per failed write

        repair()
        wait_for("health to pass again", lambda: cli("health").returncode == 0, 30)
        changed = wait_for("the save made meanwhile to be applied", lambda: [
            c for c in running_ids(docker_client, instance)
            if "RUN=two" in _env_of(docker_client, c)], 60)
        assert len(changed) == 1
        wait_for("Ready again", lambda: is_ready(cli, "Deployment/vlm"), 60)
        log = daemon.log()
        assert "Traceback" not in log
        assert log.count("takes writes again") == 1
        assert cli("health").returncode == 0
    except BaseException:
        print(picture(cli))
        print(daemon.log())
        raise
    finally:
        daemon.terminate()


def test_a_read_only_state_disk_is_a_disk_fault_and_its_recovery_is_noticed(
        small_state_disk: Path) -> None:
    """The same at the level of one write: EROFS from a tmpfs remounted read-only marks the
    state directory failing like ENOSPC, and the first write that succeeds clears it."""
    from state.atomic import write_atomic
    from state.diskhealth import WRITES

    subprocess.run(["mount", "-o", "remount,ro", str(small_state_disk)], check=True)
    try:
        with pytest.raises(OSError, match="Read-only file system"):
            write_atomic(small_state_disk / "probe", b"x")
        failing = WRITES.failing
        assert failing is not None
        assert "Read-only file system" in failing.reason
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_state_disk)], check=True)
    write_atomic(small_state_disk / "probe", b"x")
    assert WRITES.failing is None


def test_sigstop_then_sigcont_is_a_non_event(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    write(specs, deployment("vlm", pinned(emulator_image), free_port()))
    daemon = DaemonProcess(cli, ["--specs", str(specs), "--resync", RESYNC_NEVER],
                           tmp_path / "daemon.log")
    try:
        daemon.wait_healthy()
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 60)
        before = running_ids(docker_client, instance)
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            stopped = cli("health", timeout=60)  # times out against a stopped daemon
            assert stopped.returncode == 1
            assert "does not answer" in stopped.stderr
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        wait_for("health again", lambda: cli("health").returncode == 0, 30)
        assert running_ids(docker_client, instance) == before
        assert is_ready(cli, "Deployment/vlm")
        log = daemon.log()
        assert "Traceback" not in log
        assert "BrokenPipe" not in log
        # SIGUSR1: where every thread waits, in the log; the daemon goes on.
        os.kill(daemon.proc.pid, signal.SIGUSR1)
        def dumped() -> str | None:  # the dump is written a line at a time: poll for all of it
            text = daemon.log()
            return text if all(sign in text for sign in (
                "most recent call first", "Current thread", "_worker")) else None
        wait_for("every thread's stack in the log, a worker's and the signalled one's",
                 dumped, 10)
        assert cli("health").returncode == 0
    finally:
        daemon.terminate()


def test_a_daemon_started_on_a_read_only_state_disk_says_why_and_exits(
        cli: Cli, small_state_disk: Path, tmp_path: Path) -> None:
    """A running daemon rides the fault out (above); a starting one cannot take its lock, log
    and socket, and says so in one line rather than dying with a traceback."""
    specs = tmp_path / "specs"
    specs.mkdir()
    repair = _read_only(small_state_disk)
    try:
        done = cli("run", "--specs", str(specs), timeout=60)
    finally:
        repair()
    assert done.returncode == 1
    assert "cannot start:" in done.stderr
    assert "Read-only file system" in done.stderr
    assert "takes writes" in done.stderr  # what it needs, not only what failed
    assert "Traceback" not in done.stdout + done.stderr
