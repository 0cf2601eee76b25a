"""Benchmark: the daemon at 1,000 resources — D Deployments with S external RTSP streams each.

Default D=20, S=49: 20 emulated RT-VLM services and 980 RTVI streams ("1,000 resources" as
issue 10 counts them: Deployments + streams), declared as 1 Host + 20 Deployments + 20
StreamSets (41 reconciler keys). Every stream has its own external ``rtsp://`` URL on one test
server (GStreamer's RTSP server of ``tests/emulators/rtsp_source.py``, one mount per stream,
on loopback). The RTVI emulators run with ``RTVI_EMU_NO_DECODE=1``: they register streams
without decoding them (980 ffmpeg decoders do not fit two cores); the reconciler's own frame
probe still reads a frame from every URL, so the server serves real H.264.

One daemon (``reconciler run``) converges the fleet from empty (progress printed), then:
  - periodic resync, R times (default 3): ``reconciler sync`` until every key had a pass; its
    time, Docker API calls (the daemon's own counter, per Host), RTVI API calls (the emulators'
    request counters), state files written, and the time each kind's passes took in sum;
  - the daemon's RSS (now and peak) once converged and after the resyncs.
Targets (issue 10), in the same run: resync < 0.5 s at 1,000 resources, <= 2 Docker API
calls per Host per pass, RSS < 150 MiB. Converge is set against a bare limit in the same run
(issue 38): the same containers created and the same streams registered directly, in parallel,
with none of the reconciler's work (``bare_limit``).

Usage: .venv/bin/python bench/scale.py [--deployments 20] [--streams-per-deployment 49]
                                       [--resyncs 3] [--workers N] [--profile FILE]
A quick run: --deployments 2 --streams-per-deployment 5.
Needs a running Docker engine, ffmpeg and Debian's GStreamer RTSP server (``python3-gi``);
loopback only; containers (labelled) and the RTSP server are removed afterwards.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.converge import LABEL, bare_up  # noqa: E402
from bench.specdocs import deployment_doc, host_doc  # noqa: E402
from controllers.clients.rtvi_client import MAX_BATCH, RtviClient  # noqa: E402
from controllers.kinds.host.fleet import Hosts  # noqa: E402
from controllers.kinds.host.hostview import VIEW_MAX_AGE_S  # noqa: E402
from controllers.kinds.streamset.part import Streaming  # noqa: E402
from controllers.waiting import until  # noqa: E402
from emulators.image import build_emulator_image  # noqa: E402
from reconciler import control  # noqa: E402
from reconciler import logsetup as rlog  # noqa: E402
from reconciler.engine import Engine  # noqa: E402
from reconciler.kinds import PassContext  # noqa: E402
from reconciler.output import shown_condition  # noqa: E402
from specs.validate import load_spec_set  # noqa: E402
from state.keys import Key  # noqa: E402
from state.models import ResourceStatus  # noqa: E402
from state.store import Store  # noqa: E402
from tests.emulators import rtsp_source  # noqa: E402
from tests.ports import free_port  # noqa: E402

IMAGE_TAG = "rtvi-emulator:bench"
INSTANCE = "benchscale"
BASE_PORT = 22100
RECONCILER = str(Path(sys.executable).parent / "reconciler")
COLOURS = ["FF0000", "00FF00", "0000FF", "FFFF00", "00FFFF", "FF00FF", "FFFFFF"]
CONVERGE_TIMEOUT_S = 3600.0
PROGRESS_EVERY_S = 10.0
TARGETS = {"resync_s": 0.5, "rss_mib": 150.0, "calls_per_host": 2}
KINDS = ("Host", "Deployment", "StreamSet")
PASSES = "rtvi_reconciler_reconcile_duration_seconds"


def mount(d: int, s: int) -> str:
    return f"d{d}s{s}"


# --- the RTSP server ---------------------------------------------------------------------------

class RtspServer:
    """One GStreamer RTSP server with a mount per stream. Not ``RtspSource.start``: that polls
    every mount with DESCRIBE, which would prepare ~1,000 encoding pipelines at once; the
    server is ready when one mount answers (all are added before it listens)."""

    def __init__(self, port: int, mounts: list[str], log: Path) -> None:
        self.port = port
        argv = [rtsp_source.SYSTEM_PYTHON, str(Path(rtsp_source.__file__).resolve()),
                "--port", str(port)]
        for i, name in enumerate(mounts):
            argv += ["--mount", f"{name}={COLOURS[i % len(COLOURS)]}"]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT)
        first = mounts[0]
        if until(lambda: True if rtsp_source.describe_ok(port, first) else None, timeout_s=30,
                 pace=0.1) is None:
            self.stop()
            raise SystemExit(f"RTSP server did not answer; log:\n{log.read_text()[-2000:]}")

    def url(self, name: str) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


# --- specs -------------------------------------------------------------------------------------

def write_specs(folder: Path, image_id: str, deployments: int, streams: int,
                server: RtspServer) -> None:
    docs: list[dict[str, object]] = [host_doc()]
    for d in range(deployments):
        docs.append(deployment_doc(d, image_id, BASE_PORT + d, timeout_s=600, poll_s=0.5,
                                   env={"RTVI_EMU_NO_DECODE": "1", "RTVI_EMU_ACCESS_LOG": "0"}))
        docs.append({"apiVersion": "rtvi.reconciler/v1", "kind": "StreamSet",
                     "metadata": {"name": f"cams-{d}"},
                     "spec": {"deployment": f"bench-{d}",
                              "sources": [{"name": f"s{s}", "url": server.url(mount(d, s))}
                                          for s in range(streams)],
                              "readiness": {"timeoutSeconds": 1800, "maxFrameAgeSeconds": 60}}})
    tmp = folder / ".bench.yaml.tmp"
    tmp.write_text(yaml.safe_dump_all(docs))
    tmp.rename(folder / "bench.yaml")


# --- measuring ---------------------------------------------------------------------------------

def metrics(port: int) -> dict[str, float]:
    """Every sample of the daemon's /metrics, keyed by its line's name{labels}."""
    out: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def passes(sample: dict[str, float], kind: str) -> float:
    return sample.get(f'{PASSES}_count{{kind="{kind}"}}', 0.0)


def pass_seconds(sample: dict[str, float], kind: str) -> float:
    return sample.get(f'{PASSES}_sum{{kind="{kind}"}}', 0.0)


def docker_calls(sample: dict[str, float]) -> float:
    return sample.get('rtvi_reconciler_api_calls_total{target="docker:local"}', 0.0)


def rtvi_calls(deployments: int) -> int:
    """Requests the emulators answered on the product API (``/v1/``), all services, except
    ``/v1/health/*``: each container's own Docker healthcheck asks that every 5 s."""
    total = 0
    for d in range(deployments):
        state = httpx.get(f"http://127.0.0.1:{BASE_PORT + d}/emulator/state", timeout=10).json()
        total += sum(n for route, n in state.get("requests", {}).items()
                     if " /v1/" in route and "/v1/health/" not in route)
    return total


def registered(deployments: int) -> int:
    total = 0
    for d in range(deployments):
        try:
            listed = httpx.get(f"http://127.0.0.1:{BASE_PORT + d}/v1/streams/get-stream-info",
                               timeout=10)
        except httpx.HTTPError:
            continue
        if listed.status_code == 200:
            total += len(listed.json())
    return total


def file_stamps(root: Path) -> dict[str, int]:
    """Modification times of the state files (status, history, events; not the log)."""
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file() and p.name != "reconciler.log"}


def proc_cpu_s(pid: int, system_only: bool = False) -> float:
    """User + system (or only system) CPU seconds the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[12]) + (0 if system_only else int(fields[11]))
    return ticks / os.sysconf("SC_CLK_TCK")


def proc_mib(pid: int, field_name: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ready(record: ResourceStatus | None) -> bool:
    """Ready at its current spec."""
    cond = record.condition("Ready") if record is not None else None
    return record is not None and cond is not None and cond.status == "True" and (
        record.observed_generation == record.desired_generation)


def reasons(records: dict[Key, ResourceStatus | None]) -> str:
    """How many resources are not Ready, by kind and reason (``Deployment Unhealthy x3``)."""
    counts: dict[str, int] = {}
    for key, record in records.items():
        cond = shown_condition(record) if record is not None else None  # as `status` shows it
        if cond is None or cond.status != "True":
            why = f"{key.kind} {cond.reason if cond is not None else 'NoRecord'}"
            counts[why] = counts.get(why, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "-"


@dataclass
class Resync:
    seconds: float
    docker_calls: float
    rtvi_calls: int
    files_written: int
    kind_seconds: dict[str, float] = field(default_factory=dict)
    cpu_s: float = 0.0  # the daemon's own CPU time over the resync
    all_ready: bool = True  # False: something flipped (e.g. a healthcheck under load)
    idle_cpu: float = 0.0  # the daemon's CPU seconds per second just before: its background
    system_s: float = 0.0  # of cpu_s, in the kernel (thread hand-offs show here)


class Daemon:
    def __init__(self, work: Path, specs: Path, workers: int | None) -> None:
        self.state = work / "state"
        self.port = free_port()
        env = dict(os.environ, RECONCILER_STATE_DIR=str(self.state),
                   RECONCILER_INSTANCE=INSTANCE)
        self.proc = subprocess.Popen(
            [RECONCILER, "run", "--specs", str(specs), "--resync", "3600", "--metrics-address",
             f"127.0.0.1:{self.port}", *(["--workers", str(workers)] if workers else [])],
            env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def converge(self, deployments: int, streams: int) -> float:
        store = Store(self.state)
        keys = [Key.parse(f"Deployment/bench-{d}") for d in range(deployments)] + [
            Key.parse(f"StreamSet/cams-{d}") for d in range(deployments)]
        started = time.monotonic()
        last = 0.0

        def done() -> bool | None:
            nonlocal last
            if self.proc.poll() is not None:
                raise SystemExit(f"the daemon exited {self.proc.returncode}")
            records = {k: store.load(k) for k in keys}
            states = {k: ready(r) for k, r in records.items()}
            if all(states.values()):
                return True
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                deps = sum(v for k, v in states.items() if k.startswith("Deployment/"))
                sets = sum(v for k, v in states.items() if k.startswith("StreamSet/"))
                print(f"  {last - started:6.0f} s: Deployments Ready {deps}/{deployments}, "
                      f"StreamSets Ready {sets}/{deployments}, streams registered "
                      f"{registered(deployments)}/{deployments * streams}, daemon RSS "
                      f"{proc_mib(self.proc.pid, 'VmRSS'):.0f} MiB; not Ready: "
                      f"{reasons(records)}", flush=True)
            return None
        if until(done, timeout_s=CONVERGE_TIMEOUT_S, pace=0.5) is None:
            raise SystemExit(f"not converged in {CONVERGE_TIMEOUT_S:g} s")
        return time.monotonic() - started

    def resync(self, deployments: int) -> Resync:
        idle = proc_cpu_s(self.proc.pid)
        time.sleep(VIEW_MAX_AGE_S + 0.5)  # as a periodic resync finds it: no fresh host view
        idle = (proc_cpu_s(self.proc.pid) - idle) / (VIEW_MAX_AGE_S + 0.5)
        before = metrics(self.port)
        calls_rtvi = rtvi_calls(deployments)
        stamps = file_stamps(self.state)
        want = {"Host": 1, "Deployment": deployments, "StreamSet": deployments}
        cpu, system = proc_cpu_s(self.proc.pid), proc_cpu_s(self.proc.pid, system_only=True)
        started = time.monotonic()
        control.request(self.state, "POST", "/sync")  # what `reconciler sync` asks, in-process
        after: dict[str, float] = {}

        def finished() -> bool | None:
            nonlocal after
            after = metrics(self.port)
            return True if all(passes(after, k) >= passes(before, k) + n
                               for k, n in want.items()) else None
        # Each look asks the daemon's /metrics: 20 a second, not 100, or the asking costs the
        # daemon more than the resync it measures.
        if until(finished, timeout_s=CONVERGE_TIMEOUT_S, pace=0.05) is None:
            raise SystemExit("resync did not finish")
        elapsed = time.monotonic() - started
        cpu = proc_cpu_s(self.proc.pid) - cpu
        system = proc_cpu_s(self.proc.pid, system_only=True) - system
        store = Store(self.state)
        keys = [Key.parse(f"Deployment/bench-{d}") for d in range(deployments)] + [
            Key.parse(f"StreamSet/cams-{d}") for d in range(deployments)]
        all_ready = all(ready(store.load(k)) for k in keys)
        now = file_stamps(self.state)
        written = sum(1 for p, t in now.items() if stamps.get(p) != t)
        return Resync(elapsed, docker_calls(after) - docker_calls(before),
                      rtvi_calls(deployments) - calls_rtvi, written,
                      {k: pass_seconds(after, k) - pass_seconds(before, k) for k in KINDS},
                      cpu, all_ready, idle, system)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def _passes(engine: Engine, ctx: PassContext, key: Key) -> bool | None:
    return True if engine.reconcile(ctx, key).ok else None


def profile(work: Path, keys: list[str], every: list[str], out: Path, top: int) -> None:
    """With the daemon stopped: first a sequential resync in this process (every key once, one
    thread, no profiler: what the passes cost without the daemon's threads, queue and
    background work), then one pass per key of ``keys`` under cProfile (the worker threads'
    code runs here in the main thread; a probe pool's own threads show as waits). Prints each
    pass's wall time and Docker API calls, then the top functions; the stats go to ``out``
    (``python -m pstats``)."""
    store = Store(work / "state")
    rlog.configure(store.root, verbose=False)
    source = store.load(Key.parse("Source/specs"))
    spec_set = load_spec_set([work / "specs"])
    lock = store.lock()  # the daemon has stopped: this process is the one writer now
    lock.acquire()
    engine = Engine(store, store.instance(INSTANCE), lambda *_: None)
    Streaming.of(engine.services).frames_watched = True  # as in the daemon: its FrameWatch proves
    profiler = cProfile.Profile()
    try:
        ctx = engine.context(source.applied_revision if source else None, spec_set)
        for name in every:  # warm: sessions, clients, the host view; Ready again if load flipped it
            key = Key.parse(name)
            until(functools.partial(_passes, engine, ctx, key), timeout_s=120, pace=1.0)
        print()
        for i in range(3):
            time.sleep(VIEW_MAX_AGE_S + 0.5)  # as a periodic resync finds it
            wall, cpu = time.monotonic(), time.process_time()
            for name in every:
                engine.reconcile(ctx, Key.parse(name))
            print(f"sequential resync {i + 1} in-process: {time.monotonic() - wall:.3f} s wall, "
                  f"{time.process_time() - cpu:.3f} s CPU ({len(every)} passes, one thread)")
        print()
        print(f"{'profiled pass':<24} {'seconds':>8} {'Docker calls':>12}  result")
        for name in keys:
            calls = sum(x.api_calls for x in Hosts.of(engine.services).sessions.values())
            started = time.monotonic()
            profiler.enable()
            result = engine.reconcile(ctx, Key.parse(name))
            profiler.disable()
            took = time.monotonic() - started
            calls = sum(x.api_calls for x in Hosts.of(engine.services).sessions.values()) - calls
            print(f"{name:<24} {took:>8.2f} {calls:>12}  {result.message[:60]}")
    finally:
        engine.close()
        lock.release()
    profiler.dump_stats(out)
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(top)
        print(f"\n--- top {top} by {order} (all profiled passes; stats in {out}) ---")
        print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))


def bare_limit(image_id: str, deployments: int, streams: int, server: RtspServer
               ) -> tuple[float, float]:
    """The named baseline for converge: the same containers (image, env, ports) created and
    started directly, 16 at a time, until Docker calls each healthy; then the same streams
    registered directly, one ``streams/add`` per service, all services at once, until every
    service lists its own. No spec, plan, record, ownership check or frame probe: what the
    engine and the emulators need, and nothing of ours. (seconds to healthy, seconds in all)"""
    client = docker.from_env()
    started = time.monotonic()
    healthy_s = bare_up(client, image_id, [BASE_PORT + d for d in range(deployments)],
                        {"RTVI_EMU_NO_DECODE": "1", "RTVI_EMU_ACCESS_LOG": "0"})

    def register(d: int) -> None:
        entries = [{"liveStreamUrl": server.url(mount(d, s)), "description": f"s{s}",
                    "id": str(uuid.uuid4())} for s in range(streams)]
        client = RtviClient(f"http://127.0.0.1:{BASE_PORT + d}")
        try:
            for i in range(0, len(entries), MAX_BATCH):
                done = client.add_streams(entries[i:i + MAX_BATCH])
                if done.errors:
                    raise SystemExit(f"bench-{d}: streams refused: {done.errors[:3]}")
        finally:
            client.close()
    with ThreadPoolExecutor(max_workers=deployments) as pool:
        list(pool.map(register, range(deployments)))
    if until(lambda: True if registered(deployments) >= deployments * streams else None,
             timeout_s=CONVERGE_TIMEOUT_S, pace=0.2) is None:
        raise SystemExit("the bare registrations never all showed")
    return healthy_s, time.monotonic() - started


def cleanup() -> None:
    client = docker.from_env()
    for labels in (f"rtvi.reconciler/instance={INSTANCE}", LABEL):
        for container in client.containers.list(all=True, filters={"label": labels}):
            container.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--streams-per-deployment", type=int, default=49)
    parser.add_argument("--resyncs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None,
                        help="the daemon's --workers (default: its own, 16 per kind)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="after the resyncs: profile one pass of each kind (pstats file)")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--spy", type=Path, default=None,
                        help="sample the daemon with py-spy during the resyncs (collapsed "
                             "stacks, one line per stack: flamegraph.pl or speedscope read it)")
    args = parser.parse_args()
    d, s = args.deployments, args.streams_per_deployment
    print(f"daemon workers: {args.workers or 'default'}")
    print(f"resources: {d} Deployments + {d * s} RTVI streams = {d + d * s} "
          f"(declared as 1 Host + {d} Deployments + {d} StreamSets = {1 + 2 * d} keys)")
    image_id = build_emulator_image(IMAGE_TAG, labels={LABEL: "1"}, health_interval_s=5)
    cleanup()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        specs = work / "specs"
        specs.mkdir()
        server = RtspServer(free_port(), [mount(i, j) for i in range(d) for j in range(s)],
                            work / "rtsp.log")
        daemon: Daemon | None = None
        try:
            write_specs(specs, image_id, d, s, server)
            daemon = Daemon(work, specs, args.workers)
            print("converging ...", flush=True)
            converge_s = daemon.converge(d, s)
            streams = registered(d)
            rss = proc_mib(daemon.proc.pid, "VmRSS")
            print(f"converged in {converge_s:.1f} s: {streams} streams registered; "
                  f"RSS {rss:.1f} MiB", flush=True)
            resyncs = []
            spy = None if args.spy is None else subprocess.Popen(
                [str(Path(sys.executable).with_name("py-spy")), "record", "--pid",
                 str(daemon.proc.pid), "--rate", "250", "--format", "raw", "--output",
                 str(args.spy)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i in range(args.resyncs):
                resyncs.append(daemon.resync(d))
                r = resyncs[-1]
                print(f"  resync {i + 1}: {r.seconds:.2f} s", flush=True)
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                spy.wait(timeout=60)
            rss_after = proc_mib(daemon.proc.pid, "VmRSS")
            rss_peak = proc_mib(daemon.proc.pid, "VmHWM")
            server_alive = server.proc.poll() is None
            code = daemon.stop()
            if args.profile is not None:
                profile(work, ["Host/local", "Deployment/bench-0", "StreamSet/cams-0"],
                        ["Host/local", *(f"Deployment/bench-{i}" for i in range(d)),
                         *(f"StreamSet/cams-{i}" for i in range(d))],
                        args.profile, args.profile_top)
            cleanup()  # the same ports, names of our own: the daemon's containers go first
            print("the bare limit: the same containers and registrations, directly ...",
                  flush=True)
            bare_healthy_s, bare_s = bare_limit(image_id, d, s, server)
        finally:
            if daemon is not None:
                daemon.stop()
            server.stop()
            cleanup()
    print()
    print(f"{'resync':>6} {'seconds':>8} {'Docker calls':>12} {'RTVI calls':>10} "
          f"{'files written':>13} {'Host s':>7} {'Deployment s':>12} {'StreamSet s':>11} "
          f"{'daemon CPU s':>12} {'of it sys':>9} {'idle CPU %':>10} {'all Ready':>9}")
    for i, r in enumerate(resyncs):
        print(f"{i + 1:>6} {r.seconds:>8.2f} {r.docker_calls:>12.0f} {r.rtvi_calls:>10} "
              f"{r.files_written:>13} {r.kind_seconds['Host']:>7.2f} "
              f"{r.kind_seconds['Deployment']:>12.2f} {r.kind_seconds['StreamSet']:>11.2f} "
              f"{r.cpu_s:>12.2f} {r.system_s:>9.2f} {100 * r.idle_cpu:>10.0f} "
              f"{'yes' if r.all_ready else 'NO':>9}")
    print("(RTVI calls: /v1/ requests other than health; 'kind s': the sum of that kind's pass "
          "times, passes run in parallel; 'idle CPU %': the daemon's CPU over the seconds "
          "before the resync (frame watch, event follower, metrics); a resync after which not "
          "all were Ready is not a no-op and is left out below)")
    clean = [r for r in resyncs if r.all_ready] or resyncs
    times = sorted(r.seconds for r in clean)
    median = statistics.median(times)
    calls = max(r.docker_calls for r in clean)
    print()
    print(f"{'measure':<34} {'value':>10} {'target':>10}  verdict")
    for name, value, target, ok in [
        (f"resync over {d + d * s} resources, median s", median, f"< {TARGETS['resync_s']}",
         median < TARGETS["resync_s"]),
        ("Docker API calls per Host per pass", calls, f"<= {TARGETS['calls_per_host']}",
         calls <= TARGETS["calls_per_host"]),
        ("daemon RSS converged, MiB", rss, f"< {TARGETS['rss_mib']:.0f}",
         rss < TARGETS["rss_mib"]),
        ("daemon RSS after resyncs, MiB", rss_after, f"< {TARGETS['rss_mib']:.0f}",
         rss_after < TARGETS["rss_mib"]),
        ("daemon RSS peak (VmHWM), MiB", rss_peak, f"< {TARGETS['rss_mib']:.0f}",
         rss_peak < TARGETS["rss_mib"])]:
        print(f"{name:<34} {value:>10.2f} {target:>10}  {'met' if ok else 'MISSED'}")
    print(f"resyncs: best {times[0]:.2f} s, median {median:.2f} s, worst {times[-1]:.2f} s; "
          f"{sum(t < TARGETS['resync_s'] for t in times)} of {len(times)} under the target")
    print(f"converge from empty: {converge_s:.1f} s; {streams} streams registered; "
          f"daemon SIGTERM exit {code}; RTSP server alive at the end: {server_alive}")
    print(f"the bare limit (the named baseline, same run): {bare_s:.1f} s ({d} containers "
          f"healthy in {bare_healthy_s:.1f} s, then {d * s} streams registered); converge "
          f"took {converge_s / bare_s:.2f}x that")


if __name__ == "__main__":
    main()
