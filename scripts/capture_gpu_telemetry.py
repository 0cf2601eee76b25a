"""Capture GPU telemetry on a real GPU machine, as test data for
``controllers.kinds.host.gputelemetry``.

Run on a machine with an NVIDIA GPU (the device tool's H200):
    python3 scripts/capture_gpu_telemetry.py OUT_DIR
Writes, into OUT_DIR:
  - ``nvidia-smi-telemetry.csv``: the raw answer of the query ``SmiTelemetry`` sends;
  - ``nvml-snapshot.json``: ``NvmlTelemetry``'s reading taken right after it;
  - ``nvidia-smi-under-load.csv``: nvidia-smi's raw answers, every 0.5 s, during the load;
  - ``nvml-window.json``: a window sampled by ``Sampler`` (NVML, every 0.2 s) around a load
    that allocates GPU memory and keeps the GPU busy (PyTorch, when present), with readings
    before, during and after, so the tests can check that a busy window shows memory and
    utilisation above the idle baseline and that the memory came back after cleanup.
Nothing here runs in the test suite: its outputs are kept under ``tests/data/``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controllers.kinds.host.gpus import run_local
from controllers.kinds.host.gputelemetry import (
    SMI_ARGS,
    NvmlTelemetry,
    Sampler,
    SmiTelemetry,
    Snapshot,
    parse_smi,
)

LOAD_S = 4.0
LOAD_GIB = 8


def _snapshot(snap: Snapshot) -> dict[str, object]:
    return dataclasses.asdict(snap)


LOAD = f"""
import sys, time
import torch
block = torch.empty({LOAD_GIB} * 1024**3, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + {LOAD_S} + 1.0
while time.monotonic() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def _load() -> subprocess.Popen[str]:
    """A separate process holding LOAD_GIB of GPU memory and multiplying matrices: when it
    exits, its CUDA context goes too, as a service's does when its container is removed."""
    child = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise SystemExit("the load did not start (no torch or no GPU?)")
    return child


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    raw = subprocess.run(["nvidia-smi", *SMI_ARGS], capture_output=True, text=True, check=True)
    (out / "nvidia-smi-telemetry.csv").write_text(raw.stdout)
    nvml = NvmlTelemetry()
    snap = nvml.read()
    (out / "nvml-snapshot.json").write_text(json.dumps(_snapshot(snap), indent=2) + "\n")
    print("nvidia-smi:", parse_smi(raw.stdout))
    print("nvml:", snap)

    before = nvml.read()
    child = _load()
    raw_under_load: list[str] = []

    def recording(argv: list[str]) -> tuple[int, str, str]:
        status, stdout, stderr = run_local(argv)
        raw_under_load.append(stdout)
        return status, stdout, stderr
    smi = SmiTelemetry(recording)
    with Sampler(nvml, 0.2) as sampler, Sampler(smi, 0.5) as smi_sampler:
        time.sleep(LOAD_S)
    child.wait(60)
    time.sleep(1.0)  # the process is gone; let NVML see its memory back
    after = nvml.read()
    nvml.close()
    window = {name: dataclasses.asdict(w) for name, w in sampler.window().items()}
    record = {"load": f"a child process held {LOAD_GIB} GiB and ran bf16 8192x8192 products "
                      f"for {LOAD_S} s, then exited", "before": _snapshot(before),
              "during": [_snapshot(s) for s in sampler.snapshots],
              "failures": sampler.failures, "window": window, "after": _snapshot(after)}
    (out / "nvml-window.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "nvidia-smi-under-load.csv").write_text("".join(raw_under_load))
    smi_window = {name: dataclasses.asdict(w) for name, w in smi_sampler.window().items()}
    print("nvidia-smi window:", json.dumps(smi_window), smi_sampler.failures)
    print(json.dumps({"load": record["load"], "window": window,
                      "before": before.gpus[0].memory_used_mib if before.gpus else None,
                      "after": after.gpus[0].memory_used_mib if after.gpus else None}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
