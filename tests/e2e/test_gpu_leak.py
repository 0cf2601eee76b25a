"""GPU memory after cleanup, on an emulated GPU (``emulators.gpuboard``, a DCGM exporter's
``/metrics``): the emulated service allocates on it while loaded and releases on shutdown,
keeping ``RTVI_EMU_GPU_LEAK_MIB``. A leak fails the run's cleanup, naming the difference from
the baseline Preflight read; no leak passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulators.gpuboard.__main__ import UUID
from state.evidence import verify
from tests.conftest import Cli
from tests.e2e.daemon_helpers import status_of
from tests.e2e.stream_helpers import rtvi_deployment
from tests.e2e.test_port_validation import REVISION
from tests.ports import free_port
from tests.specs_factory import write


def experiment(run_id: str, port: int, board: str, leak_mib: int) -> dict[str, Any]:
    # Only the run's own service uses the emulated GPU (the template holds its own).
    env = {"RTVI_EMU_PORT": str(port), "RTVI_EMU_GPU_BOARD": board, "RTVI_EMU_GPU_MIB": "16000",
           "RTVI_EMU_GPU_LEAK_MIB": str(leak_mib)}
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "gpu"},
            "spec": {"type": "portValidation", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": port, "env": env},
                     "measurement": {"claim": "the port releases its GPU memory"},
                     "budgetSeconds": 300, "cleanupSeconds": 10,
                     "telemetry": {"dcgmUrl": f"{board}/metrics", "required": True,
                                   "gpus": [UUID], "intervalSeconds": 0.5},
                     "portValidation": {
                         "integration": {"path": "configuration"},
                         "model": {"source": "hf:org/m", "revision": REVISION,
                                   "processor": "p", "tokenizer": "t", "quantization": "bf16",
                                   "contextLength": 4096, "frameSampling": "8"},
                         "modalities": ["text"],
                         "textChecks": [{"prompt": "Say: blue sky", "facts": ["blue", "sky"]}]}}}


@pytest.mark.parametrize("leak_mib", [0, 2048])
def test_gpu_memory_must_come_back_to_its_baseline_after_cleanup(
        cli: Cli, emulator_image: str, gpu_board: str, tmp_path: Path, leak_mib: int) -> None:
    run_id = f"gpu-leak-{leak_mib}"
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, free_port()),
          experiment(run_id, free_port(), gpu_board, leak_mib))
    done = cli("apply", str(specs), "--timeout", "200", timeout=300)
    record = status_of(cli, "Experiment/gpu")
    assert record is not None, done.stdout
    assert record["facts"]["runId"] == run_id, done.stdout
    folder = cli.state_dir / "evidence" / run_id
    cleanup = json.loads((folder / "gates" / "cleanup.json").read_text())
    telemetry = json.loads((folder / "evidence" / "telemetry.json").read_text())
    assert telemetry["start"]["gpus"][UUID]["memoryUsedMiB"] == 600  # the idle baseline
    assert telemetry["window"][UUID]["memory_max_mib"] == 16600  # loaded: measured, not assumed
    if leak_mib:
        assert done.returncode == 1, record["facts"]
        assert record["facts"]["result"] == "FAIL", record["facts"]
        assert not cleanup["passed"]
        assert (f"GPU {UUID}: 2648 MiB in use, 2048 MiB above its baseline of 600 MiB (512 "
                "allowed)") in cleanup["reason"], cleanup
    else:
        assert done.returncode == 0, record["facts"]
        assert record["facts"]["result"] == "PASS", record["facts"]
        assert cleanup["passed"], cleanup
        assert cleanup["evidence"]["gpuMemory"]["after"] == {UUID: 600}
        assert set(cleanup["evidence"]["seconds"]) == {  # where a slow cleanup's time went
            "processes", "service", "containers", "listing", "gpuMemory"}, cleanup


@pytest.mark.parametrize("leak_mib", [0, 2048])
def test_gpu_memory_must_come_back_between_capacity_windows_of_a_job(
        cli: Cli, emulator_image: str, gpu_board: str, tmp_path: Path, leak_mib: int) -> None:
    """Each window's fresh service must leave the GPU as Preflight found it: a leak would be
    inherited by the next window's service and measure something else. The search runs as a
    job on its Host (the runner reads the Host's DCGM exporter itself): a capacity search's
    windows, each with a fresh service, end to end as a job."""
    run_id = f"gpu-cap-{leak_mib}"
    port = free_port()
    env = {"RTVI_EMU_PORT": str(port), "RTVI_EMU_GPU_BOARD": gpu_board,
           "RTVI_EMU_GPU_MIB": "16000", "RTVI_EMU_GPU_LEAK_MIB": str(leak_mib),
           "RTVI_EMU_BREACH_ABOVE": "1", "RTVI_EMU_BREACH_MS": "2500"}  # capacity: 1 stream
    search = {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
              "metadata": {"name": "gpu"},
              "spec": {"type": "capacity", "runId": run_id, "template": "vlm",
                       "executor": "host", "service": {"hostPort": port, "env": env},
                       "measurement": {"claim": "the highest stable live-stream count"},
                       "budgetSeconds": 300, "cleanupSeconds": 10,
                       "telemetry": {"dcgmUrl": f"{gpu_board}/metrics", "required": True,
                                     "gpus": [UUID], "intervalSeconds": 0.5},
                       "capacity": {"initialStreamCount": 1, "addStreamCount": 1,
                                    "maxStreamCount": 2, "windowSeconds": 5,
                                    "maxP95LatencyMs": 2000.0, "chunkDurationSeconds": 1}}}
    specs = tmp_path / "specs"
    write(specs, rtvi_deployment(emulator_image, free_port()), search)
    done = cli("apply", str(specs), "--timeout", "250", timeout=320)
    record = status_of(cli, "Experiment/gpu")
    assert record is not None, done.stdout + done.stderr
    folder = cli.state_dir / "evidence" / run_id
    windows = [json.loads(p.read_text()) for p in sorted(
        (folder / "evidence" / "capacity").rglob("w*.json"))]
    assert windows, record["facts"]
    first = windows[0]
    if leak_mib:
        assert first["verdict"] == "inconclusive", first
        assert (f"GPU memory not back at its baseline after the window: GPU {UUID}: 2648 MiB "
                "in use, 2048 MiB above its baseline of 600 MiB") in first["reason"], first
        assert first["gpuMemory"] == {UUID: 2648}
        assert len(windows) == 1  # the search does not go on over a leak
        assert record["facts"]["result"] != "PASS", record["facts"]
    else:
        assert done.returncode == 0, record["facts"]
        assert "highest stable 1, first unstable 2" in record["facts"]["reason"], record
        assert record["facts"]["runner"].endswith(f"run-{run_id}"), record["facts"]
        assert [w["verdict"] for w in windows] == ["stable", "unstable"], windows
        assert [w["gpuMemory"] for w in windows] == [{UUID: 600}] * 2, windows
        logs = [p.name for p in (folder / "logs").iterdir() if "-w" in p.name]
        assert len(logs) == len(windows), logs  # a fresh service per window
        assert verify(folder) == []
