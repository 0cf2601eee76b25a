"""Benchmark: replicas sharing a fleet through etcd — converge, resync and failover, 1 vs N.

The fleet of ``bench/scale.py`` (D emulated RT-VLM services with a StreamSet of S external
RTSP streams each: D + D*S resources, 1,000 by default), spread over H Hosts (this machine's
engine under H names, so there are shares to spread), with its records in a 3-member etcd
cluster on loopback (``scripts/etcd-cluster.sh``). Two scenarios in one run, each on a fresh
namespace and instance: the named baseline, **1 replica**, and **N replicas** (default 3):
  - converge from empty: until every Deployment and StreamSet is Ready;
  - resync: ``sync`` asked of every replica at once, until each key had a pass (summed over
    the replicas: each works only its own Hosts');
  - failover (N > 1): ``kill -9`` of the replica holding the most Hosts; until its Hosts are
    held by the others (the lease's TTL plus a rebalance), and until they had a pass each.

Usage: .venv/bin/python bench/replicas.py [--deployments 20] [--streams-per-deployment 49]
                                          [--hosts 4] [--replicas 3] [--lease-ttl 6]
A quick run: --deployments 4 --streams-per-deployment 5. Needs Docker, etcd (setup.sh), ffmpeg
and GStreamer's RTSP server; loopback only; everything it starts is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import docker
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.converge import LABEL  # noqa: E402
from bench.scale import (  # noqa: E402
    BASE_PORT,
    IMAGE_TAG,
    RtspServer,
    metrics,
    mount,
    passes,
    proc_cpu_s,
    ready,
)
from bench.specdocs import deployment_doc  # noqa: E402
from controllers.waiting import until  # noqa: E402
from emulators.image import build_emulator_image  # noqa: E402
from reconciler import control  # noqa: E402
from reconciler.sharing import replicas  # noqa: E402
from state.etcdgw import EtcdGateway  # noqa: E402
from state.etcdstore import EtcdStore  # noqa: E402
from state.keys import Key  # noqa: E402
from tests.ports import free_port  # noqa: E402

RECONCILER = str(Path(sys.executable).parent / "reconciler")
CLUSTER = ROOT / "scripts" / "etcd-cluster.sh"
KINDS = ("Host", "Deployment", "StreamSet")
TIMEOUT_S = 3600.0
RESYNCS = 5
FRAME_AGE_S = 600
"""Each replica's frame watch proves its sources in the background, two decoders at a time, as
often as their frame budget asks. With 980 sources and 60 s it never rests: one replica ran 2
decoders all along, three ran 6 on the same two cores, and the resync measured that load, not
the replicas (on their own machines each would have its own cores). At 600 s one round fits
and the watch rests, in both scenarios alike; the daemons' idle CPU is printed."""


def write_specs(folder: Path, image_id: str, d: int, s: int, hosts: int,
                server: RtspServer) -> None:
    docs: list[dict[str, object]] = [
        {"apiVersion": "rtvi.reconciler/v1", "kind": "Host", "metadata": {"name": f"h{h}"},
         "spec": {"docker": "unix:///var/run/docker.sock"}} for h in range(hosts)]
    for i in range(d):
        dep = deployment_doc(i, image_id, BASE_PORT + i, timeout_s=600, poll_s=0.5,
                             env={"RTVI_EMU_NO_DECODE": "1", "RTVI_EMU_ACCESS_LOG": "0"})
        dep["spec"]["host"] = f"h{i % hosts}"  # type: ignore[index]
        docs += [dep, {"apiVersion": "rtvi.reconciler/v1", "kind": "StreamSet",
                       "metadata": {"name": f"cams-{i}"},
                       "spec": {"deployment": f"bench-{i}",
                                "sources": [{"name": f"s{j}", "url": server.url(mount(i, j))}
                                            for j in range(s)],
                                "readiness": {"timeoutSeconds": 1800,
                                              "maxFrameAgeSeconds": FRAME_AGE_S}}}]
    (folder / "bench.yaml").write_text(yaml.safe_dump_all(docs))


class Resync(NamedTuple):
    seconds: float
    etcd_calls: float
    cpu_s: float  # the replicas' CPU, summed: the same work split three ways, or more of it


class Fleet:
    """N replicas of one instance on one namespace."""

    def __init__(self, work: Path, specs: Path, endpoints: list[str], n: int, ttl: int) -> None:
        self.namespace = self.instance = f"benchrep{n}"
        url = "etcd://" + ",".join(e.removeprefix("http://") for e in endpoints)
        self.store = EtcdStore(work, EtcdGateway(endpoints), self.namespace)
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path, int]] = {}
        for r in range(n):
            state = work / f"{self.namespace}-r{r}"
            state.mkdir(mode=0o700)
            port = free_port()
            env = dict(os.environ, RECONCILER_STATE_DIR=str(state),
                       RECONCILER_INSTANCE=self.instance,
                       RECONCILER_STATE=f"{url}/{self.namespace}")
            self.procs[f"r{r}"] = (subprocess.Popen(
                [RECONCILER, "run", "--specs", str(specs), "--resync", "3600", "--replica",
                 f"r{r}", "--lease-ttl", str(ttl), "--metrics-address", f"127.0.0.1:{port}"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), state, port)

    def live(self) -> list[str]:
        return [n for n, (p, _, _) in self.procs.items() if p.poll() is None]

    def passes(self, names: list[str]) -> float:
        return sum(passes(metrics(self.procs[n][2]), k) for n in names for k in KINDS)

    def wait(self, what: str, probe: object) -> float:
        started = time.monotonic()
        if until(probe, timeout_s=TIMEOUT_S, pace=0.05) is None:  # type: ignore[arg-type]
            raise SystemExit(f"{self.namespace}: {what} did not happen")
        return time.monotonic() - started

    def converge(self, keys: list[str]) -> float:
        return self.wait("converge", lambda: True if all(
            ready(self.store.load(Key.parse(k))) for k in keys) else None)

    def etcd_calls(self, names: list[str]) -> float:
        """Requests the replicas' stores made of etcd so far (every kind, summed)."""
        return sum(v for n in names for k, v in metrics(self.procs[n][2]).items()
                   if k.startswith('rtvi_reconciler_api_calls_total{target="etcd:'))

    def idle_cpu(self, seconds: float = 3.0) -> float:
        """The replicas' CPU over ``seconds`` with nothing asked of them, in % of one core
        (summed): their background (frame watch, leases, rebalancing, metrics)."""
        names = self.live()
        before = self.cpu_s(names)
        time.sleep(seconds)  # a measuring window, not a wait for something
        return 100 * (self.cpu_s(names) - before) / seconds

    def cpu_s(self, names: list[str]) -> float:
        """CPU seconds the replicas ``names`` used so far, summed."""
        return sum(proc_cpu_s(self.procs[n][0].pid) for n in names)

    def resync(self, total: int) -> Resync:
        """One resync of every replica; the etcd requests and CPU of all of them meanwhile
        (their background's included)."""
        names = self.live()
        before, calls, cpu = self.passes(names), self.etcd_calls(names), self.cpu_s(names)
        started = time.monotonic()
        # At once, as their periodic resyncs come: one after the other, the last replica's
        # request waited for the others' (40-100 ms each while the first ones' passes ran).
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            list(pool.map(lambda n: control.request(self.procs[n][1], "POST", "/sync"), names))
        self.wait("resync", lambda: True if self.passes(names) >= before + total else None)
        return Resync(time.monotonic() - started, self.etcd_calls(names) - calls,
                      self.cpu_s(names) - cpu)

    def failover(self, keys_of: dict[str, int]) -> tuple[float, float]:
        """Kill -9 the busiest replica; (its shares held by others, and each of their
        resources had a pass), seconds from the kill."""
        views = replicas(self.store)
        victim = max(views, key=lambda v: len(v.shares))
        survivors = [n for n in self.live() if n != victim.name]
        before = self.passes(survivors)
        owed = sum(keys_of.get(s, 0) for s in victim.shares)
        proc = self.procs[victim.name][0]
        started = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait()

        def taken() -> bool | None:
            held = {s for v in replicas(self.store) if v.name != victim.name for s in v.shares}
            return True if set(victim.shares) <= held else None
        owned = self.wait("takeover", taken)
        self.wait("passes after takeover",
                  lambda: True if self.passes(survivors) >= before + owed else None)
        return owned, time.monotonic() - started

    def stop(self) -> None:
        for proc, _, _ in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _, _ in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        client = docker.from_env()
        for container in client.containers.list(all=True, filters={
                "label": f"rtvi.reconciler/instance={self.instance}"}):
            container.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--streams-per-deployment", type=int, default=49)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--lease-ttl", type=int, default=6)
    args = parser.parse_args()
    d, s, h = args.deployments, args.streams_per_deployment, args.hosts
    keys = [f"Deployment/bench-{i}" for i in range(d)] + [f"StreamSet/cams-{i}" for i in range(d)]
    # The resources each Host's share holds: its Host, its Deployments and their StreamSets.
    keys_of = {f"Host/h{j}": 1 + 2 * len(range(j, d, h)) for j in range(h)}
    print(f"resources: {d} Deployments + {d * s} RTVI streams = {d + d * s} on {h} Hosts "
          f"({h + 2 * d} keys); lease TTL {args.lease_ttl} s", flush=True)
    image_id = build_emulator_image(IMAGE_TAG, labels={LABEL: "1"}, health_interval_s=5)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        specs = work / "specs"
        specs.mkdir()
        ports = [",".join(str(free_port()) for _ in range(3)) for _ in range(2)]
        started = subprocess.run(["bash", str(CLUSTER), "start", str(work / "etcd"), *ports],
                                 capture_output=True, text=True, check=True)
        endpoints = started.stdout.strip().split(",")
        server = RtspServer(free_port(), [mount(i, j) for i in range(d) for j in range(s)],
                            work / "rtsp.log")
        try:
            write_specs(specs, image_id, d, s, h, server)
            for n in sorted({1, args.replicas}):
                fleet = Fleet(work, specs, endpoints, n, args.lease_ttl)
                try:
                    print(f"{n} replica(s): converging ...", flush=True)
                    converge = fleet.converge(keys)
                    idle = fleet.idle_cpu()
                    resyncs = sorted(fleet.resync(h + 2 * d) for _ in range(RESYNCS))
                    resync, calls = resyncs[0].seconds, resyncs[0].etcd_calls
                    median = statistics.median(r.seconds for r in resyncs)
                    cpu = statistics.median(r.cpu_s for r in resyncs)
                    owned, passed = fleet.failover(keys_of) if n > 1 else (float("nan"),) * 2
                finally:
                    fleet.stop()
                rows.append((n, converge, resync, median, cpu, calls, idle, owned, passed))
                times = ", ".join(f"{r.seconds:.2f}" for r in resyncs)
                print(f"  converged in {converge:.1f} s, resyncs {times} s (the best: "
                      f"{calls:.0f} etcd requests; CPU {cpu:.2f} s a resync), idle CPU "
                      f"{idle:.0f} %", flush=True)
        finally:
            server.stop()
            subprocess.run(["bash", str(CLUSTER), "stop", str(work / "etcd")], check=False)
    base = rows[0]
    print()
    print(f"{'replicas':>8} {'converge s':>10} {'x base':>7} {'resync s':>9} {'x base':>7} "
          f"{'median s':>8} {'x base':>7} {'CPU s':>6} {'etcd requests':>13} "
          f"{'idle CPU %':>10} {'failover: owned s':>17} {'passed s':>9}")
    for n, converge, resync, median, cpu, calls, idle, owned, passed in rows:
        print(f"{n:>8} {converge:>10.1f} {converge / base[1]:>7.2f} {resync:>9.2f} "
              f"{resync / base[2]:>7.2f} {median:>8.2f} {median / base[3]:>7.2f} {cpu:>6.2f} "
              f"{calls:>13.0f} {idle:>10.0f} {owned:>17.1f} {passed:>9.1f}")
    print(f"(baseline: 1 replica; resync: the best of {RESYNCS}, and their median; failover: "
          "from kill -9 of the replica holding the most Hosts, until the others hold them (TTL "
          f"{args.lease_ttl} s plus a rebalance every TTL/3) and until each of their resources "
          "had a pass; etcd requests: those of the best resync, every replica's, leases and "
          "rebalancing included; CPU s: the replicas' CPU a resync, summed, median; idle CPU: "
          "the replicas' own, summed, over 3 s before the resyncs)")


if __name__ == "__main__":
    main()
