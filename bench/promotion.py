"""Benchmark: qualifying a candidate side by side, against measuring both versions by hand.

Ours: a Deployment with ``spec.promotion`` is changed to a candidate; one ``reconciler apply``
qualifies it (candidate and running version under the same canary at once) and promotes it.
Baseline (named, in the same run): ``by hand`` — what an engineer does without it, per the
field guide: a canary Experiment on the candidate, then one on the current version, one after
the other (each a fresh service), then the recreate onto the candidate. Both on the RTVI
emulator with the same canary (4 streams, isolation, one 10 s performance window), the same
image and Host, one after the other here. With ``--capacity``, ours adds the capacity gate
(a search on the candidate, then on a fresh copy of the running version) and by hand adds
the two capacity Experiments the field guide runs after the canaries. Printed: wall time from
the change to the candidate serving, measurement windows held (isolation + performance per
service, plus every capacity window, counted from the evidence), and services started.

Usage: .venv/bin/python bench/promotion.py [--rounds 2] [--capacity]
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
SEARCH = {"initialStreamCount": 2, "maxStreamCount": 6, "windowSeconds": 5,
          "maxP95LatencyMs": 5000, "chunkDurationSeconds": 1}
ADMITS = "5"  # both versions admit 5 streams: each search finds 5 stable, 6 unstable


def host() -> dict[str, Any]:
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Host", "metadata": {"name": "local"},
            "spec": {"docker": "unix:///var/run/docker.sock"}}


def deployment(image: str, promotion: bool, capacity: bool = False, **env: str
               ) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "host": "local", "image": f"rtvi-emulator@{image}", "network": "host",
        "model": {"use": "vllm-compatible", "path": "ngc:nim/nvidia/bench:1"},
        "port": {"host": PORT, "container": PORT},
        "env": {"RTVI_EMU_HOST": "127.0.0.1", "RTVI_EMU_PORT": str(PORT),
                "RTVI_EMU_ACCESS_LOG": "0", "RTVI_EMU_LATENCY_MS": "200",
                "RTVI_EMU_MAX_STREAMS": ADMITS, **env},
        "readiness": {"timeoutSeconds": 120, "pollSeconds": 0.2}}
    if promotion:
        gates: dict[str, Any] = {"canary": LOAD, "maxP95Regression": "50%"}
        if capacity:
            gates["capacity"] = SEARCH
        spec["promotion"] = {"candidate": {"port": ROOM, "env": {"RTVI_EMU_PORT": str(ROOM)}},
                             "gates": gates, "budgetSeconds": 600, "cleanupSeconds": 30}
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


def searched(name: str, run_id: str, **env: str) -> dict[str, Any]:
    """A capacity search of Deployment vlm's spec with ``env`` added, as the guide runs it."""
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment", "metadata": {"name": name},
            "spec": {"type": "capacity", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": HAND, "env": {"RTVI_EMU_PORT": str(HAND), **env}},
                     "measurement": {"claim": "the version holds its streams",
                                     "latencySource": LOAD["latencySource"]},
                     "budgetSeconds": 300, "cleanupSeconds": 30, "capacity": SEARCH}}


def capacity_windows(state: Path) -> int:
    """Every capacity window the evidence under ``state`` holds (both sides, every run)."""
    return sum(1 for _ in (state / "evidence").glob("**/evidence/capacity/*/w*-*[0-9].json"))


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


def ours(image: str, work: Path, capacity: bool) -> tuple[float, int]:
    specs, state = work / "ours", work / "state-ours"
    apply(state, specs, deployment(image, True, capacity))
    took = apply(state, specs, deployment(image, True, capacity, RTVI_EMU_FAIL_SEED="7"))
    return took, capacity_windows(state)


def by_hand(image: str, work: Path, tag: str, capacity: bool) -> tuple[float, int]:
    """A canary of the candidate, then one of the current version (then, with ``capacity``,
    a capacity search of each), then the recreate."""
    state, specs = work / "state-hand", work / "hand"
    current = deployment(image, False)
    apply(state, specs, current)
    took = apply(state, specs, current, canary("cand", f"cand-{tag}", RTVI_EMU_FAIL_SEED="7"))
    took += apply(state, specs, current, canary("base", f"base-{tag}"))
    if capacity:
        took += apply(state, specs, current, searched("cap-cand", f"cap-cand-{tag}",
                                                      RTVI_EMU_FAIL_SEED="7"))
        took += apply(state, specs, current, searched("cap-base", f"cap-base-{tag}"))
    took += apply(state, specs, deployment(image, False, RTVI_EMU_FAIL_SEED="7"))
    return took, capacity_windows(state)


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
    parser.add_argument("--capacity", action="store_true",
                        help="add the capacity gate (ours) and two capacity searches (by hand)")
    args = parser.parse_args()
    client = docker.from_env()
    image = build_emulator_image(IMAGE_TAG)
    mine: list[tuple[float, int]] = []
    theirs: list[tuple[float, int]] = []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-promotion-") as folder:
            work = Path(folder)
            try:
                mine.append(ours(image, work, args.capacity))
                cleanup(client, work)
                theirs.append(by_hand(image, work, f"{os.getpid()}-{n}", args.capacity))
            finally:
                cleanup(client, work)
    what = "2 canaries" + (" + 2 searches" if args.capacity else "")
    print(f"{'':<32} {'wall s (median)':>15} {'windows':>8} {'held at once':>12}")
    for name, rows, at_once in (("ours: qualify + promote", mine, 2),
                                (f"by hand: {what}", theirs, 0)):
        windows = 4 + statistics.median(w for _, w in rows)
        print(f"{name:<32} {statistics.median(t for t, _ in rows):>15.1f} {windows:>8g} "
              f"{at_once:>12}")
    ratio = statistics.median(t for t, _ in mine) / statistics.median(t for t, _ in theirs)
    print(f"ratio {ratio:.2f}x; windows: an isolation and a performance window per side (held "
          "at once by ours, one after another by hand), plus every capacity window, one after "
          "another on both (two searches on one GPU would measure each other)")


if __name__ == "__main__":
    main()
