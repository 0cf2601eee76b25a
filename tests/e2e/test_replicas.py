"""Replicas sharing a fleet through a real 3-member etcd cluster (issue 28): real daemons,
real Docker (three Hosts on this engine under other names, one over SSH), a canary as a job.

Each replica is ``reconciler run --state etcd://... --replica rN`` with its own local state
directory (another machine, as far as the state goes)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import docker
import httpx

from reconciler.sharing import replicas
from state.etcdgw import EtcdGateway
from state.etcdstore import EtcdStore
from state.keys import Key
from tests.conftest import Cli
from tests.e2e.daemon_helpers import DaemonProcess, run_containers, wait_for
from tests.e2e.stream_helpers import rtvi_deployment
from tests.e2e.test_host_jobs import measured
from tests.etcd_cluster import EtcdCluster
from tests.ports import free_port
from tests.remote_engine import (  # noqa: F401
    RemoteEngine,
    remote_engine_fixture,
    remote_fixture,
)
from tests.specs_factory import HOST, write

TTL_S = 6
TAKEOVER_S = TTL_S + 2 * TTL_S / 3 + 10  # expiry, a rebalance, a pass on a loaded machine


def url_of(cluster: EtcdCluster) -> str:
    return "etcd://" + ",".join(e.removeprefix("http://") for e in cluster.endpoints) + "/t"


def alias(name: str) -> dict[str, Any]:
    """This machine's engine as another Host."""
    return {**HOST, "metadata": {"name": name}}


def service(name: str, host: str, image: str) -> dict[str, Any]:
    dep = rtvi_deployment(image, free_port())
    dep["metadata"]["name"] = name
    dep["spec"]["host"] = host
    return dep


DEPLOYMENTS = ["Deployment/vlm", "Deployment/d2", "Deployment/d-edge"]
SHARES = ["Host/edge", "Host/h2", "Host/h3", "Host/local", "fleet"]


def four_hosts(specs: Path, remote: RemoteEngine, image: str, *more: dict[str, Any]) -> None:
    """Four Hosts (this engine under three names, one over SSH) and services on three of
    them (each emulator's healthcheck is a process a second: a fourth only loads the
    machine the tests beside these run on)."""
    write(specs, alias("h2"), alias("h3"), remote.host_document("edge"),
          service("vlm", "local", image), service("d2", "h2", image),
          service("d-edge", "edge", image), *more)


class Replicas:
    """N replicas of one instance, each with its own state directory."""

    def __init__(self, cli: Cli, cluster: EtcdCluster, specs: Path, root: Path) -> None:
        self.cli, self.url, self.specs, self.root = cli, url_of(cluster), specs, root
        self.store = EtcdStore(root, EtcdGateway(cluster.endpoints), "t")
        self.daemons: dict[str, DaemonProcess] = {}
        self.clis: dict[str, Cli] = {}

    def start(self, name: str, replica: str | None = None, metrics: int | None = None
              ) -> DaemonProcess:
        """A daemon ``name`` (its folder), replica ``replica`` (default: ``name``), serving
        its metrics on ``metrics`` (default: none)."""
        folder = self.root / name
        folder.mkdir(mode=0o700, exist_ok=True)
        self.clis[name] = Cli(folder, self.cli.instance, {"RECONCILER_STATE": self.url})
        daemon = DaemonProcess(self.clis[name], [
            "--specs", str(self.specs), "--replica", replica or name, "--lease-ttl",
            str(TTL_S), "--resync", "3600",
            *(["--metrics-address", f"127.0.0.1:{metrics}"] if metrics else [])],
            self.root / f"{name}.log")
        self.daemons[name] = daemon
        return daemon

    def holder(self, share: str) -> str | None:
        return next((v.name for v in replicas(self.store) if share in v.shares), None)

    def ready(self, *names: str) -> bool:
        for name in names:
            record = self.store.load(Key.parse(name))
            ready = record.condition("Ready") if record is not None else None
            if ready is None or ready.status != "True":
                return False
        return True

    def conditions(self, resource: str) -> str:
        record = self.store.load(Key.parse(resource))
        return str(record.conditions) if record is not None else ""

    def health(self, name: str) -> dict[str, Any]:
        done = self.clis[name]("health", timeout=30)
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def stop(self) -> None:
        for daemon in self.daemons.values():
            if daemon.proc.poll() is None:
                daemon.terminate()


def test_replicas_share_four_hosts_and_a_killed_ones_hosts_and_canary_are_taken_over(
        cli: Cli, etcd_cluster: EtcdCluster, emulator_image: str, remote: RemoteEngine,
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    four_hosts(specs, remote, emulator_image, measured("rep-canary", 15, streams=1))
    group = Replicas(cli, etcd_cluster, specs, tmp_path)
    metrics_port = free_port()
    try:
        for name in ("r1", "r2", "r3"):
            group.start(name, metrics=metrics_port if name == "r1" else None)
        wait_for("every Deployment Ready", lambda: group.ready(*DEPLOYMENTS), 180, 0.2)
        wait_for("the canary measuring", lambda: "performance" in group.conditions(
            "Experiment/canary"), 180, 0.2)
        views = replicas(group.store)
        assert sorted(v.name for v in views) == ["r1", "r2", "r3"]
        held = sorted(s for v in views for s in v.shares)
        assert held == SHARES  # each once
        assert max(len(v.shares) for v in views) == 2  # even: 5 shares on 3 replicas
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        r1 = next(v for v in views if v.name == "r1")
        assert f"rtvi_reconciler_replica_shares {len(r1.shares)}.0" in scraped, scraped
        assert "rtvi_reconciler_replica_acting 1.0" in scraped
        ids = {d: [c.id for c in run_containers(_client(d, docker_client, remote),
                                                cli.instance, d)] for d in DEPLOYMENTS}
        assert all(len(found) == 1 for found in ids.values()), ids
        # Converged once: nothing recreated. (A Created event may be missing: a replica
        # that created a container as the shares were first spread had its record write
        # fenced, and the new holder adopted the container.)
        made = [e.resource for e in group.store.events.read()
                if e.reason in ("Created", "Recreated") and e.resource.startswith("Deploy")]
        assert sorted(set(made)) == sorted(made), made
        victim = group.holder("Host/local")  # the canary's: its job is followed from there
        assert victim is not None
        group.daemons[victim].kill9()
        wait_for("Host/local held by a surviving replica",
                 lambda: group.holder("Host/local") not in (None, victim), TAKEOVER_S, 0.2)
        assert victim not in [v.name for v in replicas(group.store)]

        def verdict() -> str | None:
            record = group.store.load(Key.parse("Experiment/canary"))
            return str(record.facts.get("result") or "") or None if record else None
        assert wait_for("the canary's verdict", verdict, 180, 0.5) == "PASS"
        assert {d: [c.id for c in run_containers(_client(d, docker_client, remote),
                                                 cli.instance, d)]
                for d in DEPLOYMENTS} == ids  # adopted: none recreated, none doubled
        laptop = tmp_path / "laptop"
        laptop.mkdir(mode=0o700)
        elsewhere = Cli(laptop, cli.instance, {"RECONCILER_STATE": group.url})
        live = elsewhere("status", "--live")
        assert live.returncode == 0, live.stdout + live.stderr
        lines = live.stdout.splitlines()
        assert lines[0].split() == ["REPLICA", "HOLDS", "LEASE", "RENEWED", "EXPIRES", "IN"]
        rows = {line.split()[0]: line for line in lines[1:3]}
        assert sorted(rows) == [n for n in ("r1", "r2", "r3") if n != victim], live.stdout
        assert "Host/local" in live.stdout
        assert "s ago" in live.stdout
        assert "Deployment/d-edge" in live.stdout  # then the records, as status shows them
        # Its evidence, from a machine that ran nothing: kept in etcd by its follower.
        wait_for("the canary's evidence kept in etcd", lambda: group.store.gateway.get(
            f"{group.store.prefix}bundles/rep-canary/meta"), 60, 0.2)
        shown = elsewhere("evidence", "rep-canary", "--verify")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert "PASS" in shown.stdout
        assert "verified: every file matches checksums.sha256" in shown.stdout
    finally:
        group.stop()


def test_a_woken_replica_acts_on_nothing_and_no_quorum_stops_every_replica_until_it_returns(
        cli: Cli, etcd_cluster: EtcdCluster, emulator_image: str, remote: RemoteEngine,
        docker_client: docker.DockerClient, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    four_hosts(specs, remote, emulator_image)
    group = Replicas(cli, etcd_cluster, specs, tmp_path)
    clients = (docker_client, remote)
    try:
        for name in ("r1", "r2", "r3"):
            group.start(name)
        wait_for("every Deployment Ready", lambda: group.ready(*DEPLOYMENTS), 180, 0.2)
        sleeper = group.holder("Host/local")
        assert sleeper is not None
        os.kill(group.daemons[sleeper].proc.pid, signal.SIGSTOP)
        wait_for("the paused replica's Hosts held by the others",
                 lambda: group.holder("Host/local") not in (None, sleeper), TAKEOVER_S, 0.2)
        # Its name taken meanwhile (a replacement started elsewhere): once woken it cannot
        # join again, so anything it did from here on would be on its old, expired lease.
        group.start("replacement", replica=sleeper)
        wait_for("the replacement present", lambda: sleeper in [
            v.name for v in replicas(group.store)], 30, 0.2)
        os.kill(group.daemons[sleeper].proc.pid, signal.SIGCONT)
        first = group.health(sleeper)
        wait_for("the woken replica saying why it acts on nothing", lambda: (
            group.health(sleeper).get("replica") or {}).get("actsOnNothing"), 30, 0.2)
        access_log(specs, "0", "1")  # work for whoever acts
        wait_for("the change converged by the live replicas",
                 lambda: converged(group, clients, cli.instance, "1"), 180, 0.5)
        later = group.health(sleeper)
        assert later["dockerCalls"] == first["dockerCalls"], (first, later)
        assert later["replica"]["etcdWrites"] == first["replica"]["etcdWrites"], (first, later)
        assert later["replica"]["holds"] == []
        assert group.daemons[sleeper].terminate() == 0

        # One member down: reconciliation goes on. Two down: no replica acts, each says why.
        etcd_cluster.kill("m1")
        access_log(specs, "1", "0")
        wait_for("a change converged with one etcd member down",
                 lambda: converged(group, clients, cli.instance, "0"), 180, 0.5)
        etcd_cluster.kill("m2")
        live = [n for n in group.daemons if n != sleeper]
        wait_for("every live replica saying it acts on nothing", lambda: all(
            (group.health(n).get("replica") or {}).get("actsOnNothing") for n in live),
            TAKEOVER_S + 10, 0.5)
        assert all(group.clis[n]("health", timeout=30).returncode == 1 for n in live)
        said = group.clis[live[0]]("status", timeout=60)
        assert said.returncode == 1
        assert "no etcd member answered" in said.stderr, said.stderr  # each member's reason
        etcd_cluster.start("m1")
        etcd_cluster.start("m2")
        wait_for("the replicas acting again", lambda: all(
            not (group.health(n).get("replica") or {}).get("actsOnNothing") for n in live),
            TAKEOVER_S + 20, 0.5)
        wait_for("every share held again", lambda: sorted(
            s for v in replicas(group.store) for s in v.shares) == SHARES, TAKEOVER_S, 0.2)
    finally:
        group.stop()


def access_log(specs: Path, old: str, new: str) -> None:
    path = specs / "specs.yaml"
    path.write_text(path.read_text().replace(f"RTVI_EMU_ACCESS_LOG: '{old}'",
                                             f"RTVI_EMU_ACCESS_LOG: '{new}'"))


def converged(group: Replicas, clients: tuple[docker.DockerClient, RemoteEngine],
              instance: str, value: str) -> bool:
    """Every service runs with the access log setting ``value``, and is Ready."""
    running = [c for d in DEPLOYMENTS for c in run_containers(_client(d, *clients), instance, d)]
    return len(running) == len(DEPLOYMENTS) and all(
        f"RTVI_EMU_ACCESS_LOG={value}" in c.attrs["Config"]["Env"] and c.status == "running"
        for c in running) and group.ready(*DEPLOYMENTS)


def _client(resource: str, local: docker.DockerClient, remote: RemoteEngine
            ) -> docker.DockerClient:
    return remote.client if resource.endswith("d-edge") else local

