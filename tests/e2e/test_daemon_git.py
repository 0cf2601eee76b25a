"""The daemon following a real bare Git repository (file://), against the real Docker engine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import docker
import yaml

from tests.conftest import Cli
from tests.e2e.daemon_helpers import (
    DaemonProcess,
    condition,
    field_of,
    is_ready,
    owned,
    running_ids,
    status_of,
    wait_for,
)
from tests.e2e.gitrepo_helpers import GitRepo
from tests.ports import free_port
from tests.specs_factory import HOST, deployment, pinned

INTERVAL_S = 3.0  # short enough for a test, long enough to tell a poke from a fetch
POKE_BOUND_S = 60.0  # with an hour-long interval, only the poke acts within this (a loaded
# machine may take seconds: a bound, not a measurement)


def _yaml(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


def test_git_commit_sync_broken_push_and_fix(
        cli: Cli, instance: str, emulator_image: str, docker_client: docker.DockerClient,
        tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"deploy/host.yaml": _yaml(HOST), "README.md": "specs live in deploy/\n"})
    daemon = _follow(cli, repo, INTERVAL_S, tmp_path / "daemon.log")
    try:
        port = free_port()
        first = repo.commit({"deploy/vlm.yaml": _yaml(
            deployment("vlm", pinned(emulator_image), port))}, "add vlm")
        committed = time.monotonic()
        wait_for("a container for the committed spec", lambda: owned(docker_client, instance),
                 INTERVAL_S * 1.1 + 3)
        assert time.monotonic() - committed <= INTERVAL_S * 1.1 + 3  # within one interval
        wait_for("Ready", lambda: is_ready(cli, "Deployment/vlm"), 30)
        record = status_of(cli, "Deployment/vlm")
        assert record is not None
        assert record["applied_revision"] == first

    finally:
        assert daemon.terminate() == 0, daemon.log()

    # `reconciler sync` fetches at once: with an hour-long interval, only the poke can explain
    # a change acted on within POKE_BOUND_S. The restart also shows the converged state is kept.
    daemon = _follow(cli, repo, 3600, tmp_path / "daemon-2.log")
    try:
        wait_for("Ready after the restart", lambda: is_ready(cli, "Deployment/vlm"), 10)
        second = repo.commit({"deploy/vlm.yaml": _yaml(deployment(
            "vlm", pinned(emulator_image), port, env={"GENERATION": 2}))}, "env change")
        [old] = running_ids(docker_client, instance)
        assert cli("sync").returncode == 0
        wait_for("the change to be acted on",
                 lambda: [i for i in running_ids(docker_client, instance) if i != old]
                 or None, POKE_BOUND_S)
        wait_for("Ready on the second revision",
                 lambda: is_ready(cli, "Deployment/vlm")
                 and field_of(cli, "Deployment/vlm", "applied_revision") == second, 30)
        [current] = running_ids(docker_client, instance)

        # A broken push: last good state kept, the source Stalled naming file and line.
        broken_text = _yaml(deployment("vlm", pinned(emulator_image), port,
                                       env={"GENERATION": 3})).replace(
            "  host: local\n", "  host: local\n  replicas: 2\n")
        bad = repo.commit({"deploy/vlm.yaml": broken_text}, "broken")
        assert cli("sync").returncode == 0

        def stalled() -> dict[str, object] | None:
            cond = condition(status_of(cli, "Source/specs"), "Stalled")
            return cond if cond and cond["status"] == "True" else None
        cond = wait_for("the source to report Stalled", stalled, 5)
        line = broken_text.splitlines().index("  replicas: 2") + 1
        assert f"vlm.yaml:{line}:" in str(cond["message"]), cond["message"]
        assert "spec.replicas" in str(cond["message"])
        assert bad[:12] in str(
            status_of(cli, "Source/specs"))
        assert running_ids(docker_client, instance) == [current]
        assert field_of(cli, "Deployment/vlm", "applied_revision") == second

        # The fix recovers.
        fixed = repo.commit({"deploy/vlm.yaml": _yaml(deployment(
            "vlm", pinned(emulator_image), port, env={"GENERATION": 3}))}, "fix")
        assert cli("sync").returncode == 0
        wait_for("recovery on the fixed revision",
                 lambda: is_ready(cli, "Deployment/vlm")
                 and field_of(cli, "Deployment/vlm", "applied_revision") == fixed, 30)
        assert (condition(status_of(cli, "Source/specs"), "Stalled") or {}).get(
            "status") == "False"
        assert len(owned(docker_client, instance)) == 1
    finally:
        assert daemon.terminate() == 0, daemon.log()


def _follow(cli: Cli, repo: GitRepo, interval_s: float, log: Path) -> DaemonProcess:
    daemon = DaemonProcess(cli, ["--git", repo.url, "--branch", "main", "--path", "deploy",
                                 "--interval", str(interval_s), "--resync", "3600"], log)
    daemon.wait_healthy()
    return daemon
