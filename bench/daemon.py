"""Benchmark: the daemon (`reconciler run`) at N Deployments, against named targets.

For each N (default 10 and 50) one daemon converges N emulator Deployments, then:
  - periodic resync: `reconciler sync` until every resource had a pass; its time and Docker
    API calls (baseline: `docker compose up -d` of the same services when nothing changed,
    measured in the same run by bench/converge.py — here against the issue's targets);
  - RSS of the daemon once converged;
  - spec save → first action: a Deployment's env changed K times (default 20); the time from
    the save to the daemon's "recreate ... because" progress line, p50 and p95. The saves are
    safe writes (a temp file renamed over the spec), which are whole when they appear and skip
    the folder's quiet period; K/4 saves written in place (truncate, then write, which may be
    caught half-written) wait the quiet period (0.5 s by default), and their p50 is shown too;
  - SIGTERM with a readiness wait in flight: time to exit and the exit status.

Usage: .venv/bin/python bench/daemon.py [--n 10 --n 50] [--saves 20]
Needs a running Docker engine; loopback only; containers are removed afterwards.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import docker
import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.specdocs import deployment_doc, host_doc  # noqa: E402
from controllers.kinds.host.hostview import VIEW_MAX_AGE_S  # noqa: E402
from controllers.waiting import until  # noqa: E402
from emulators.image import build_emulator_image  # noqa: E402
from reconciler import control  # noqa: E402
from state.keys import Key  # noqa: E402
from state.models import ResourceStatus  # noqa: E402
from state.store import Store  # noqa: E402
from tests.ports import free_port  # noqa: E402

IMAGE_TAG = "rtvi-emulator:bench"
LABEL = "rtvi.bench"
INSTANCE = "benchd"
BASE_PORT = 21100
RECONCILER = str(Path(sys.executable).parent / "reconciler")
TARGETS = {"resync_s": 0.5, "rss_mib": 150.0, "save_p50_ms": 150.0, "sigterm_s": 10.0,
           "calls_per_host": 2}


def deployment(i: int, image_id: str, env: dict[str, str] | None = None,
               slow: bool = False) -> dict[str, object]:
    env = dict(env or {})
    if slow:
        env["RTVI_EMU_STARTUP_DELAY_S"] = "600"
    return deployment_doc(i, image_id, BASE_PORT + i, env=env)


def write(folder: Path, n: int, image_id: str, save: int | None = None,
          slow: bool = False, in_place: bool = False) -> None:
    docs: list[dict[str, object]] = [host_doc()]
    docs += [deployment(i, image_id, {"BENCH_SAVE": str(save)} if i == 0 and save else None)
             for i in range(n)]
    if slow:
        docs.append(deployment(n, image_id, slow=True))
    if in_place:  # as an editor that truncates, then writes
        (folder / "bench.yaml").write_text(yaml.safe_dump_all(docs))
        return
    tmp = folder / ".bench.yaml.tmp"
    tmp.write_text(yaml.safe_dump_all(docs))
    tmp.rename(folder / "bench.yaml")  # atomic, as an editor's safe write


def metric(port: int, name: str, **labels: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Daemon:
    def __init__(self, work: Path, specs: Path, quiet: float) -> None:
        self.state = work / "state"  # one owner: the second daemon adopts the first's fleet
        self.port = free_port()
        self.env = dict(os.environ, RECONCILER_STATE_DIR=str(self.state),
                        RECONCILER_INSTANCE=INSTANCE)
        self.proc = subprocess.Popen(
            [RECONCILER, "run", "--specs", str(specs), "--resync", "3600", "--metrics-address",
             f"127.0.0.1:{self.port}", "--quiet-period", str(quiet)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready(self, n: int, timeout: float = 600) -> None:
        store = Store(self.state)

        def converged(record: ResourceStatus | None) -> bool:
            ready = record.condition("Ready") if record is not None else None
            return record is not None and ready is not None and ready.status == "True" and (
                record.observed_generation == record.desired_generation)  # at the new spec

        def all_ready() -> bool | None:
            records = [store.load(Key("Deployment", f"bench-{i}")) for i in range(n)]
            return True if all(converged(r) for r in records) else None
        if until(all_ready, timeout_s=timeout, pace=0.2) is None:
            raise SystemExit(f"{n} Deployments not Ready in {timeout:g}s")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def resync(self, n: int) -> tuple[float, float]:
        passes = "rtvi_reconciler_reconcile_duration_seconds_count"
        done = metric(self.port, passes, kind="Deployment")
        calls = metric(self.port, "rtvi_reconciler_api_calls_total", target="docker:local")
        time.sleep(VIEW_MAX_AGE_S + 0.5)  # as a periodic resync finds it: no fresh view
        calls = metric(self.port, "rtvi_reconciler_api_calls_total", target="docker:local")
        started = time.monotonic()
        control.request(self.state, "POST", "/sync")  # what `reconciler sync` asks, in-process
        if until(lambda: True if metric(self.port, passes, kind="Deployment") >= done + n
                 else None, timeout_s=120, pace=0.01) is None:
            raise SystemExit("resync did not finish")
        elapsed = time.monotonic() - started
        return elapsed, metric(self.port, "rtvi_reconciler_api_calls_total",
                               target="docker:local") - calls

    def first_actions(self, after: float) -> list[float]:
        """Times (Unix seconds) of "recreate ... because" progress lines logged after ``after``."""
        found = []
        for line in (self.state / "reconciler.log").read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == "progress" and str(entry.get("message", "")).startswith(
                    "recreate "):
                at = datetime.fromisoformat(str(entry["timestamp"])).timestamp()
                if at > after:
                    found.append(at)
        return found

    def stop(self) -> tuple[float, int]:
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=120)
        return time.monotonic() - started, code


def acted_after(daemon: Daemon, at: float) -> list[float] | None:
    return daemon.first_actions(at) or None


def save_latencies(daemon: Daemon, specs: Path, n: int, image_id: str, saves: range,
                   in_place: bool = False) -> list[float]:
    out = []
    for k in saves:
        saved = time.time()
        write(specs, n, image_id, save=k, in_place=in_place)
        got = until(functools.partial(acted_after, daemon, saved), timeout_s=30, pace=0.01)
        if got is None:
            raise SystemExit(f"save {k} was not acted on")
        out.append((got[0] - saved) * 1000)
        daemon.ready(n)
    return out


def run(n: int, image_id: str, saves: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        specs = work / "specs"
        specs.mkdir()
        write(specs, n, image_id)
        started = time.monotonic()
        daemon = Daemon(work, specs, quiet=0.5)
        try:
            daemon.ready(n)
            row = {"converge_s": time.monotonic() - started, "rss_mib": daemon.rss_mib()}
            row["resync_s"], row["calls"] = daemon.resync(n)
            saved = save_latencies(daemon, specs, n, image_id, range(1, saves + 1))
            row["save_p50_ms"] = statistics.median(saved)
            row["save_p95_ms"] = statistics.quantiles(saved, n=20)[-1]
            in_place = save_latencies(daemon, specs, n, image_id,
                                      range(saves + 1, saves + 1 + max(5, saves // 4)), True)
            row["save_p50_in_place_ms"] = statistics.median(in_place)
            write(specs, n, image_id, save=saves, slow=True)  # one model that loads forever
            until(lambda: True if len(cleanup_list()) > n else None, timeout_s=60, pace=0.2)
            row["sigterm_s"], row["exit"] = daemon.stop()
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()
    return row


def cleanup_list() -> list[object]:
    return list(docker.from_env().containers.list(  # sparse: no inspect of one just removed
        all=True, sparse=True, filters={"label": f"rtvi.reconciler/instance={INSTANCE}"}))


def cleanup() -> None:
    for container in cleanup_list():
        container.remove(force=True)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="deployments (repeatable)")
    parser.add_argument("--saves", type=int, default=20)
    args = parser.parse_args()
    image_id = build_emulator_image(IMAGE_TAG, labels={LABEL: "1"}, health_interval_s=5)
    rows = []
    for n in args.n or [10, 50]:
        cleanup()
        try:
            rows.append((n, run(n, image_id, args.saves)))
        finally:
            cleanup()
    print(f"{'N':>4} {'converge s':>10} {'resync s':>9} {'calls':>6} {'RSS MiB':>8} "
          f"{'save p50 ms':>11} {'p95 ms':>7} {'p50 in place':>12} {'SIGTERM s':>9} {'exit':>4}")
    for n, r in rows:
        print(f"{n:>4} {r['converge_s']:>10.2f} {r['resync_s']:>9.3f} {r['calls']:>6.0f} "
              f"{r['rss_mib']:>8.1f} {r['save_p50_ms']:>11.0f} {r['save_p95_ms']:>7.0f} "
              f"{r['save_p50_in_place_ms']:>12.0f} {r['sigterm_s']:>9.2f} {r['exit']:>4.0f}")
    print(f"target: resync < {TARGETS['resync_s']} s (at 1,000 resources), calls <= "
          f"{TARGETS['calls_per_host']} per Host, RSS < {TARGETS['rss_mib']:.0f} MiB, save p50 "
          f"< {TARGETS['save_p50_ms']:.0f} ms (safe writes), SIGTERM <= "
          f"{TARGETS['sigterm_s']:.0f} s, exit 0")


if __name__ == "__main__":
    main()
