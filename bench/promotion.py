"""Benchmark: qualifying a candidate side by side, against measuring both versions by hand.

Ours: a Deployment with ``spec.promotion`` is changed to a candidate; one ``reconciler apply``
qualifies it (candidate and running version under the same canary at once) and promotes it.
Baseline (named, in the same run): ``by hand`` — what an engineer does without it, per the
field guide: a canary Experiment on the candidate, then one on the current version, one after
the other (each a fresh service), then the recreate onto the candidate. Both on the RTVI
emulator with the same canary (4 streams, isolation, one 10 s performance window), the same
image and Host, one after the other here. Printed: wall time from the change to the candidate
serving, measurement windows held (isolation + performance, per service), and services
started for measuring.

Usage: .venv/bin/python bench/promotion.py [--rounds 2]
Needs a running Docker engine; everything runs on loopback and is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulators.image import build_emulator_image  # noqa: E402

RECONCILER = str(ROOT / ".venv" / "bin" / "reconciler")
IMAGE_TAG = "rtvi-emulator:bench"
INSTANCE = "bench-promotion"  # its own names and labels: never a user's containers
PORT, ROOM, HAND = 19300, 19301, 19302
LOAD = {"streams": 4, "performanceSeconds": 10, "chunkDurationSeconds": 1,
        "latencySource": "processing_latency"}


def host() -> dict[str, Any]:
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Host", "metadata": {"name": "local"},
            "spec": {"docker": "unix:///var/run/docker.sock"}}


def deployment(image: str, promotion: bool, **env: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "host": "local", "image": f"rtvi-emulator@{image}", "network": "host",
        "model": {"use": "vllm-compatible", "path": "ngc:nim/nvidia/bench:1"},
        "port": {"host": PORT, "container": PORT},
        "env": {"RTVI_EMU_HOST": "127.0.0.1", "RTVI_EMU_PORT": str(PORT),
                "RTVI_EMU_ACCESS_LOG": "0", "RTVI_EMU_LATENCY_MS": "200", **env},
        "readiness": {"timeoutSeconds": 120, "pollSeconds": 0.2}}
    if promotion:
        spec["promotion"] = {"candidate": {"port": ROOM, "env": {"RTVI_EMU_PORT": str(ROOM)}},
                             "gates": {"canary": LOAD, "maxP95Regression": "50%"},
                             "budgetSeconds": 300, "cleanupSeconds": 30}
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Deployment",
            "metadata": {"name": "vlm"}, "spec": spec}


def canary(name: str, run_id: str, **env: str) -> dict[str, Any]:
    """A canary of Deployment vlm's spec with ``env`` added: the version it would measure."""
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment", "metadata": {"name": name},
            "spec": {"type": "canary", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": HAND, "env": {"RTVI_EMU_PORT": str(HAND), **env}},
                     "measurement": {"claim": "the version measures up",
                                     "latencySource": LOAD["latencySource"]},
                     "budgetSeconds": 300, "cleanupSeconds": 30,
                     "canary": {k: v for k, v in LOAD.items() if k != "latencySource"}}}


def apply(state: Path, specs: Path, *docs: dict[str, Any]) -> float:
    specs.mkdir(parents=True, exist_ok=True)
    (specs / "specs.yaml").write_text(yaml.safe_dump_all([host(), *docs], sort_keys=False))
    env = {**os.environ, "RECONCILER_STATE_DIR": str(state), "RECONCILER_INSTANCE": INSTANCE}
    began = time.monotonic()
    done = subprocess.run([RECONCILER, "apply", str(specs), "--timeout", "600"], env=env,
                          capture_output=True, text=True, check=False)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"apply failed:\n{done.stdout}\n{done.stderr}")
    return took


def ours(image: str, work: Path) -> float:
    specs = work / "ours"
    apply(work / "state-ours", specs, deployment(image, True))
    return apply(work / "state-ours", specs, deployment(image, True, RTVI_EMU_FAIL_SEED="7"))


def by_hand(image: str, work: Path, tag: str) -> float:
    """A canary of the candidate, then one of the current version, then the recreate."""
    state, specs = work / "state-hand", work / "hand"
    current = deployment(image, False)
    apply(state, specs, current)
    took = apply(state, specs, current, canary("cand", f"cand-{tag}", RTVI_EMU_FAIL_SEED="7"))
    took += apply(state, specs, current, canary("base", f"base-{tag}"))
    return took + apply(state, specs, deployment(image, False, RTVI_EMU_FAIL_SEED="7"))


def cleanup(client: docker.DockerClient, work: Path) -> None:
    for state in ("state-ours", "state-hand"):
        if (work / state).exists():
            env = {**os.environ, "RECONCILER_STATE_DIR": str(work / state),
                   "RECONCILER_INSTANCE": INSTANCE}
            subprocess.run([RECONCILER, "delete", "Deployment/vlm"], env=env,
                           capture_output=True, check=False)
    for container in client.containers.list(all=True, filters={
            "label": f"rtvi.reconciler/instance={INSTANCE}"}):
        container.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    client = docker.from_env()
    image = build_emulator_image(IMAGE_TAG)
    mine: list[float] = []
    theirs: list[float] = []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-promotion-") as folder:
            work = Path(folder)
            try:
                mine.append(ours(image, work))
                cleanup(client, work)
                theirs.append(by_hand(image, work, f"{os.getpid()}-{n}"))
            finally:
                cleanup(client, work)
    print(f"{'':<26} {'wall s (median)':>15} {'windows':>8} {'services measured':>17}")
    print(f"{'ours: qualify + promote':<26} {statistics.median(mine):>15.1f} {2:>8} {2:>17}")
    print(f"{'by hand: 2 canaries':<26} {statistics.median(theirs):>15.1f} {4:>8} {2:>17}")
    print(f"ratio {statistics.median(mine) / statistics.median(theirs):.2f}x; windows: an "
          "isolation and a performance window per side, held at once by ours, one after "
          "another by hand")


if __name__ == "__main__":
    main()
