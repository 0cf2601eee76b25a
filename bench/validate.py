"""Benchmark: ``validate`` of a large spec set, against the same files without cross checks.

Issue 26: a check across resources that compares every pair (once, the port claims: 31,200
Deployments took 84 s) makes a spec set a denial of service. This script writes a spec set of
``--resources`` resources (Hosts, Deployments publishing distinct ports, StreamSets; some
Deployments sharing ports on distinct addresses, the port check's worst case) into ``--files``
files, then times, in turn (A B A B ...):

  phase                     what runs
  load (baseline)           read and parse the YAML, validate each document on its own
  validate                  the same plus every rule across resources (``reconciler validate``)

and prints one table: median, min and max seconds, the ratio, and the target (validate of
10,000 resources within 2 s, issue 26). Nothing but a temporary folder is touched.

Usage: .venv/bin/python bench/validate.py [--resources 10000] [--files 40] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specs.errors import SpecError  # noqa: E402
from specs.loader import load_paths  # noqa: E402
from specs.validate import SpecSet, build_spec_set  # noqa: E402

TARGET_SECONDS = 2.0
TARGET_RESOURCES = 10_000
PER_HOST = 100


def host(name: str) -> str:
    return f"""apiVersion: rtvi.reconciler/v1
kind: Host
metadata: {{name: {name}}}
spec: {{docker: "unix:///var/run/docker.sock"}}
"""


def deployment(name: str, host_name: str, port: int, address: str) -> str:
    return f"""apiVersion: rtvi.reconciler/v1
kind: Deployment
metadata: {{name: {name}, labels: {{team: bench}}}}
spec:
  host: {host_name}
  profile: exploration
  image: rtvi-emulator:dev
  model: {{preset: cr3-nano-reasoner-fp8}}
  port: {{host: {port}, address: "{address}"}}
  env: {{RTVI_EMU_PORT: "8000"}}
"""


def streamset(name: str, deployment_name: str) -> str:
    return f"""apiVersion: rtvi.reconciler/v1
kind: StreamSet
metadata: {{name: {name}}}
spec:
  deployment: {deployment_name}
  sources:
  - {{name: red, synthetic: {{colour: RED}}}}
"""


def documents(count: int) -> list[str]:
    """``count`` spec documents: a Host per 100, its Deployments on ports 20000 and up (every
    other one on a second loopback address of the previous one's port), a StreamSet per 10."""
    docs: list[str] = []
    hosts = 0
    while len(docs) < count:
        name = f"h{hosts}"
        docs.append(host(name))
        for i in range(PER_HOST):
            if len(docs) >= count:
                break
            dep = f"d{hosts}-{i}"
            docs.append(deployment(dep, name, 20000 + i // 2, f"127.0.0.{1 + i % 2}"))
            if i % 10 == 9 and len(docs) < count:
                docs.append(streamset(f"s{hosts}-{i}", dep))
        hosts += 1
    return docs


def write(folder: Path, docs: list[str], files: int) -> None:
    per_file = -(-len(docs) // files)
    for n in range(files):
        chunk = docs[n * per_file:(n + 1) * per_file]
        if chunk:
            (folder / f"set{n:03d}.yaml").write_text("---\n".join(chunk))


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=TARGET_RESOURCES)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as tmp:
        folder = Path(tmp)
        write(folder, documents(args.resources), args.files)

        def baseline() -> SpecSet:
            return build_spec_set(load_paths([folder]), cross=False)

        def full() -> SpecSet:
            return build_spec_set(load_paths([folder]))

        try:
            count = len(full().resources)  # also proves the set is valid
        except SpecError as exc:  # e.g. too few --files: a file over the loader's limits
            print(f"the generated spec set is refused:\n{exc}", file=sys.stderr)
            return 2
        theirs, ours = [], []
        for _ in range(args.runs):
            theirs.append(timed(baseline))
            ours.append(timed(full))
    # Judged from 10,000 resources up (the size), scaled linearly above it: below it,
    # start-up costs that do not grow with the set weigh too much for a fair verdict.
    judged = args.resources >= TARGET_RESOURCES
    target = TARGET_SECONDS * args.resources / TARGET_RESOURCES
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"validate: {count} resources in {args.files} files, {args.runs} runs each\n")
    print(f"{'phase':<18}{'median s':>10}{'min s':>9}{'max s':>9}{'ratio':>8}  target")
    note = f"<= {target:.1f} s" if judged else f"judged from {TARGET_RESOURCES} resources"
    print(f"{'load (baseline)':<18}{statistics.median(theirs):10.3f}{min(theirs):9.3f}"
          f"{max(theirs):9.3f}{1.0:8.2f}  -")
    print(f"{'validate':<18}{statistics.median(ours):10.3f}{min(ours):9.3f}{max(ours):9.3f}"
          f"{ratio:8.2f}  {note}")
    if not judged:
        return 0
    met = statistics.median(ours) <= target
    print(f"\ntarget {'met' if met else 'NOT met'}: validate median "
          f"{statistics.median(ours):.2f} s for {count} resources")
    return 0 if met else 1

if __name__ == "__main__":
    raise SystemExit(main())
