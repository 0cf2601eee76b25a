"""Benchmark: converge N Deployments of one image from a Host that lacks it (issue 37).

A real registry on loopback (``scripts/registry.sh``: TLS and a password) holds the emulator
image with a layer of random bytes (``--mib``). Before each trial the image is removed from
the engine, so every trial pulls it. The same N services are brought up twice in the same
run, A and B in turn:

  A: reconciler apply       N Deployments, the registry's login by reference in the Host
  B: docker compose up -d --wait   N services, ``pull_policy: missing``, after ``docker login``
                                   (into a throwaway DOCKER_CONFIG)

and the table gives the seconds from the command's start to every service ready, and how
many pulls the engine made (its own image events): the reconciler's pull is shared by the N
Deployments (one pull), as compose's is by its services.

Usage: .venv/bin/python bench/pulls.py [--n 1 --n 10] [--runs 2] [--mib 64]
Needs a running Docker engine and docker-registry (scripts/setup.sh installs both); loopback
only; containers, images and the registry are removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.converge import ensure_compose  # noqa: E402
from bench.specdocs import deployment_doc, host_doc  # noqa: E402
from emulators.image import build_emulator_image  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.registry import CERTS_D, USER, Registry  # noqa: E402

IMAGE_TAG = "rtvi-emulator:bench"
INSTANCE = "benchpull"
LABEL = "rtvi.bench.pulls"
RECONCILER = str(Path(sys.executable).parent / "reconciler")


def pulls_since(client: docker.DockerClient, name: str, since: float) -> int:
    events = client.events(since=since, until=time.time(), decode=True,
                           filters={"type": "image", "event": "pull"})
    return sum(1 for e in events if str(e.get("id", "")).startswith(name))


def absent(client: docker.DockerClient, ref: str) -> None:
    try:
        client.images.remove(ref, force=True)
    except docker.errors.ImageNotFound:
        return


def cleanup(client: docker.DockerClient) -> None:
    for label in (LABEL, f"rtvi.reconciler/instance={INSTANCE}"):
        for container in client.containers.list(all=True, filters={"label": label}):
            container.remove(force=True)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from the command's start to its exit; it must succeed."""
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed:\n{done.stderr[-3000:]}")
    return seconds


def ours(n: int, ref: str, registry: Registry, work: Path) -> float:
    folder = work / f"specs-{n}"
    host = host_doc()
    host["spec"] = {"registries": [registry.login]}
    docs = [host, *(deployment_doc(i, "", free_port()) for i in range(n))]
    for doc in docs[1:]:
        doc["spec"]["image"] = ref  # type: ignore[index]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.yaml").write_text(yaml.safe_dump_all(docs))
    env = dict(os.environ, NGC_API_KEY=registry.password)
    cmd = [RECONCILER, "--state-dir", str(work / f"state-{n}-{time.time_ns()}"), "--instance",
           INSTANCE, "--allow-pull", "127.0.0.1", "apply", str(folder), "--timeout", "600"]
    return timed(cmd, env)


def theirs(n: int, ref: str, registry: Registry, work: Path, compose: list[str]) -> float:
    config = work / "docker-config"
    env = dict(os.environ, DOCKER_CONFIG=str(config))
    if not config.exists():  # a throwaway config: the login is never kept
        plugins = config / "cli-plugins"  # where docker looks for compose under it
        plugins.mkdir(parents=True)
        installed = Path.home() / ".docker" / "cli-plugins" / "docker-compose"
        if installed.exists():
            (plugins / "docker-compose").symlink_to(installed.resolve())
        subprocess.run(["docker", "login", registry.address, "-u", USER, "--password-stdin"],
                       input=registry.password, text=True, env=env, check=True,
                       capture_output=True)
    path = work / f"compose-{n}.yaml"
    path.write_text(yaml.safe_dump({"services": {f"svc-{i}": {
        "image": ref, "pull_policy": "missing", "init": True, "labels": {LABEL: "1"},
        "ports": [f"127.0.0.1:{free_port()}:8000"],
        "environment": {"VLM_MODEL_TO_USE": "vllm-compatible",
                        "MODEL_PATH": "ngc:nim/nvidia/bench:1"}} for i in range(n)}}))
    cmd = [*compose, "-f", str(path), "-p", f"rtvibenchpull{n}", "up", "-d", "--wait"]
    return timed(cmd, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="Deployments (repeatable)")
    parser.add_argument("--runs", type=int, default=2, help="trials of each, A and B in turn")
    parser.add_argument("--mib", type=int, default=64, help="random MiB in the image's layer")
    args = parser.parse_args()
    sizes = args.n or [1, 10]
    client = docker.from_env()
    build_emulator_image(IMAGE_TAG, health_interval_s=1)
    compose = ensure_compose()
    folder = Path(tempfile.mkdtemp(prefix="rtvi-bench-registry-"))
    registry = Registry(folder, free_port(), "bench-" + secrets.token_hex(8))
    registry.start()
    rows = []
    try:
        digest = registry.push(client, IMAGE_TAG, "vss/rt-vlm", "bench", random_mib=args.mib)
        ref = f"{registry.address}/vss/rt-vlm@{digest}"
        name = f"{registry.address}/vss/rt-vlm"
        with tempfile.TemporaryDirectory(prefix="rtvi-bench-pulls-") as tmp:
            work = Path(tmp)
            for n in sizes:
                a: list[float] = []
                b: list[float] = []
                pulls = {"A": 0, "B": 0}
                for _ in range(args.runs):
                    for who in ("A", "B"):
                        cleanup(client)
                        absent(client, ref)
                        since = time.time()
                        seconds = (ours(n, ref, registry, work) if who == "A"
                                   else theirs(n, ref, registry, work, compose))
                        (a if who == "A" else b).append(seconds)
                        pulls[who] = max(pulls[who], pulls_since(client, name, since))
                rows.append((n, a, b, pulls))
    finally:
        cleanup(client)
        absent(client, f"{registry.address}/vss/rt-vlm")
        registry.stop()
        shutil.rmtree(CERTS_D / registry.address, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nconverge from a Host without the image ({args.mib} MiB random layer), seconds: "
          f"median (min-max) of {args.runs}; A and B in turn\n")
    print(f"{'N':>4}  {'A: reconciler apply':>24} {'pulls':>6}  "
          f"{'B: compose up --wait':>24} {'pulls':>6}  {'A/B':>6}")

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"
    for n, a, b, pulls in rows:
        print(f"{n:>4}  {cell(a):>24} {pulls['A']:>6}  {cell(b):>24} {pulls['B']:>6}  "
              f"{statistics.median(a) / statistics.median(b):>5.2f}x")
    print(json.dumps({"shared_pull": all(r[3]["A"] == 1 for r in rows)}))


if __name__ == "__main__":
    main()
