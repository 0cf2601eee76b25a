"""GPU telemetry: parsing and windows checked against output captured on a real H200
(``scripts/capture_gpu_telemetry.py``, kept in ``tests/data/h200-telemetry``), the nvidia-smi
path run through a stand-in ``nvidia-smi`` that prints that captured output (this machine
has no GPU), and the DCGM exporter path against a loopback HTTP server.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from controllers.kinds.host.gpus import run_local
from controllers.kinds.host.gputelemetry import (
    DcgmTelemetry,
    GpuReading,
    GpuWindow,
    NvmlTelemetry,
    Sampler,
    SmiSamples,
    SmiTelemetry,
    Snapshot,
    TelemetryUnavailable,
    nvml_answers,
    parse_dcgm,
    parse_smi,
    summarise,
)
from controllers.waiting import until
from tests.controllers.h200 import DATA, UUID
from tests.controllers.h200 import TOTAL_MIB as H200_TOTAL_MIB
from tests.controllers.h200 import snapshot as _snapshot
from tests.ports import free_port
from tests.serving import served

# --- what the H200 said ---------------------------------------------------------------------

def test_idle_h200_parses_and_nvml_agrees_with_nvidia_smi() -> None:
    smi = parse_smi((DATA / "nvidia-smi-telemetry.csv").read_text())
    assert smi == (GpuReading(0, UUID, 0, H200_TOTAL_MIB, 0.0),)
    nvml = _snapshot(json.loads((DATA / "nvml-snapshot.json").read_text()))
    assert nvml.source == "nvml"
    assert nvml.gpus == smi


def test_nvml_memory_version_2_is_the_one_that_matches_nvidia_smi() -> None:
    """Why ``_memory`` asks for version 2: version 1 counts the driver's reservation as used."""
    v1, v2 = (DATA / "nvml-memory-v1-v2.txt").read_text().splitlines()
    assert "used: 644939776 B" in v1  # 615 MiB "used" on an idle GPU
    assert "reserved: 644939776 B" in v2
    assert "used: 0 B" in v2


def test_the_window_under_load_and_the_cleanup_proof() -> None:
    record = json.loads((DATA / "nvml-window.json").read_text())
    during = [_snapshot(s) for s in record["during"]]
    window = summarise(during)
    assert {k: GpuWindow(**v) for k, v in record["window"].items()} == window
    busy = window[UUID]
    before = _snapshot(record["before"]).by_uuid()[UUID]
    after = _snapshot(record["after"]).by_uuid()[UUID]
    assert busy.samples == len(during) == 20
    assert record["failures"] == []
    assert busy.memory_mean_mib > before.memory_used_mib + 8 * 1024  # the 8 GiB it held
    assert busy.utilization_mean_pct is not None
    assert busy.utilization_mean_pct > 50
    assert after.memory_used_mib == before.memory_used_mib == 0  # back once the load exited


def test_nvidia_smi_under_load_gives_the_window_recorded_there() -> None:
    raw = (DATA / "nvidia-smi-under-load.csv").read_text().splitlines(keepends=True)
    window = summarise([Snapshot("nvidia-smi", float(i), parse_smi(line))
                        for i, line in enumerate(raw)])
    said = next(line for line in (DATA / "capture.log").read_text().splitlines()
                if line.startswith("nvidia-smi window: "))
    recorded = json.loads(said.removeprefix("nvidia-smi window: ").rsplit(" ", 1)[0])
    assert {k: GpuWindow(**v) for k, v in recorded.items()} == window
    assert window[UUID].samples == len(raw) == 8


# --- parsing rules ------------------------------------------------------------------------------

def test_utilisation_not_reported_is_none_not_zero() -> None:
    assert parse_smi(f"0, {UUID}, 12, 100, [N/A]\n1, MIG-x, 3, 10, [Not Supported]\n") == (
        GpuReading(0, UUID, 12, 100, None), GpuReading(1, "MIG-x", 3, 10, None))


@pytest.mark.parametrize(("text", "said"), [
    ("No devices were found\n", "unexpected line 'No devices were found'"),
    (f"0, {UUID}, 12, 100\n", "unexpected line"),
    (f"x, {UUID}, 12, 100, 5\n", "unexpected line"),
    ("0, not-a-uuid, 12, 100, 5\n", "unexpected line"),
    (f"0, {UUID}, [N/A], 100, 5\n", "no memory figures"),
    (f"0, {UUID}, 12, [N/A], 5\n", "no memory figures"),
    (f"0, {UUID}, twelve, 100, 5\n", "memory.used is 'twelve'"),
    (f"0, {UUID}, -1, 100, 5\n", "memory.used is '-1'"),
    (f"0, {UUID}, 12, nan, 5\n", "memory.total is 'nan'"),
    (f"0, {UUID}, 12, 100, inf\n", "utilization.gpu is 'inf'"),
])
def test_a_line_that_is_not_a_gpu_row_is_an_error_not_a_gpu_less(text: str, said: str) -> None:
    with pytest.raises(TelemetryUnavailable) as caught:
        parse_smi(text)
    assert said in str(caught.value)
    assert str(caught.value).startswith("nvidia-smi: ")


def test_no_gpus_and_blank_lines_are_an_empty_reading() -> None:
    assert parse_smi("") == ()
    assert parse_smi("\n  \n") == ()


def test_a_window_mean_skips_unreported_utilisation_and_keeps_the_peak() -> None:
    snaps = [Snapshot("nvidia-smi", 1.0, (GpuReading(0, UUID, 100, 1000, 10.0),)),
             Snapshot("nvidia-smi", 2.0, (GpuReading(0, UUID, 300, 1000, None),)),
             Snapshot("nvidia-smi", 3.0, (GpuReading(0, UUID, 200, 1000, 30.0),
                                          GpuReading(1, "GPU-b", 5, 10, None)))]
    assert summarise(snaps) == {UUID: GpuWindow(UUID, 3, 200.0, 300, 20.0),
                                "GPU-b": GpuWindow("GPU-b", 1, 5.0, 5, None)}
    assert summarise([]) == {}


# --- nvidia-smi as a program --------------------------------------------------------------------

@pytest.fixture
def smi_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``nvidia-smi`` first on PATH that prints what the H200's printed (or what a test
    writes to its ``answer`` file) and exits with the status in ``status``."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "answer").write_text((DATA / "nvidia-smi-telemetry.csv").read_text())
    (folder / "status").write_text("0")
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat '{folder}/answer'\necho 'stand-in stderr' >&2\n"
                      f"exit $(cat '{folder}/status')\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def test_nvidia_smi_is_asked_for_the_query_and_parsed(smi_stand_in: Path) -> None:
    snap = SmiTelemetry().read()
    assert snap.source == "nvidia-smi"
    assert snap.gpus == (GpuReading(0, UUID, 0, H200_TOTAL_MIB,
                                                                     0.0),)


def test_a_failing_nvidia_smi_says_where_and_why(smi_stand_in: Path) -> None:
    (smi_stand_in / "status").write_text("9")
    with pytest.raises(TelemetryUnavailable) as caught:
        SmiTelemetry(where="Host gpu-1").read()
    assert str(caught.value) == "nvidia-smi on Host gpu-1 exited 9: stand-in stderr"


def test_no_nvidia_smi_is_unavailable_not_zero(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_local(["nvidia-smi"]) == (127, "", "nvidia-smi: not found")
    with pytest.raises(TelemetryUnavailable) as caught:
        SmiTelemetry().read()
    assert str(caught.value) == "nvidia-smi on this machine exited 127: nvidia-smi: not found"


def test_nvml_answers_here_exactly_when_the_driver_library_is_present() -> None:
    reason = nvml_answers()
    if ctypes.util.find_library("nvidia-ml") is None:  # this machine and CI: no GPU driver
        assert reason is not None
        assert reason.startswith("NVML: ")
        with pytest.raises(TelemetryUnavailable):
            NvmlTelemetry().read()
    else:  # pragma: no cover - a GPU machine
        assert reason is None or reason.startswith("NVML: ")


# --- sampling a window --------------------------------------------------------------------------

def test_a_sampler_reads_until_the_window_ends(smi_stand_in: Path) -> None:
    with Sampler(SmiTelemetry(), 0.05) as sampler:
        assert until(lambda: True if len(sampler.snapshots) >= 3 else None, timeout_s=20,
                     pace=0.02)
    count = len(sampler.snapshots)
    assert sampler.failures == []
    assert sampler.window() == {UUID: GpuWindow(UUID, count, 0.0, 0, 0.0)}
    assert len(sampler.snapshots) == count  # nothing read after the window ended


def test_a_window_shorter_than_its_interval_still_reads_its_end(smi_stand_in: Path) -> None:
    """A port validation's one request can end between two samples: what the GPU held at the
    window's end (the service's allocation that landed meanwhile) is read as the window
    closes, not left to an interval that never came."""
    with Sampler(SmiTelemetry(), 3600) as sampler:
        assert until(lambda: True if sampler.snapshots else None, timeout_s=20, pace=0.02)
        (smi_stand_in / "answer").write_text(f"0, {UUID}, 16600, 143771, 7\n")
    assert [s.gpus[0].memory_used_mib for s in sampler.snapshots] == [0, 16600]
    assert sampler.window()[UUID].memory_max_mib == 16600


def test_a_failed_read_is_a_reason_not_a_sample(smi_stand_in: Path) -> None:
    (smi_stand_in / "status").write_text("3")
    with Sampler(SmiTelemetry(), 0.05) as sampler:
        assert until(lambda: True if sampler.failures else None, timeout_s=20, pace=0.02)
    assert sampler.snapshots == []
    assert sampler.window() == {}
    assert sampler.failures[0] == "nvidia-smi on this machine exited 3: stand-in stderr"


def test_a_stopping_reconciler_ends_the_window_early(smi_stand_in: Path) -> None:
    stop = threading.Event()
    stop.set()
    with Sampler(SmiTelemetry(), 0.05, stop) as sampler:
        assert until(lambda: True if not sampler._thread.is_alive() else None, timeout_s=20,
                     pace=0.02)
    assert sampler.snapshots == []


# --- DCGM exporter ------------------------------------------------------------------------------

# dcgm-exporter's documented text format, with the H200's own figures under load.
DCGM_TEXT = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H200",\
Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="580.159.04"}} 99
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H200",\
Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="580.159.04"}} 133991
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H200",\
Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="580.159.04"}} 9165
# HELP DCGM_FI_DEV_FB_RESERVED Framebuffer memory reserved (in MiB).
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{{gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H200",\
Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="580.159.04"}} 615
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H200",\
Hostname="gpu-1",DCGM_FI_DRIVER_VERSION="580.159.04"}} 1980
"""


def test_dcgm_text_gives_the_same_reading_as_nvidia_smi() -> None:
    assert parse_dcgm(DCGM_TEXT) == (GpuReading(0, UUID, 9165, H200_TOTAL_MIB, 99.0),)


def test_a_gpu_without_framebuffer_figures_is_left_out() -> None:
    only_util = "\n".join(DCGM_TEXT.splitlines()[:3]) + "\n"
    assert parse_dcgm(only_util) == ()


@pytest.fixture
def exporter() -> Iterator[list[tuple[int, str]]]:
    """A loopback HTTP server answering /metrics with the (status, body) a test puts first."""
    answers: list[tuple[int, str]] = [(200, DCGM_TEXT)]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers[0]
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    answers.append((server.server_port, ""))
    with served(server, "dcgm-exporter"):
        yield answers


def _url(exporter: list[tuple[int, str]]) -> str:
    return f"http://127.0.0.1:{exporter[-1][0]}/metrics"


def test_dcgm_exporter_is_read_over_http(exporter: list[tuple[int, str]]) -> None:
    snap = DcgmTelemetry(_url(exporter)).read()
    assert snap.source == "dcgm"
    assert snap.gpus == (GpuReading(0, UUID, 9165, H200_TOTAL_MIB, 99.0),)


@pytest.mark.parametrize(("answer", "said"), [
    ((503, "busy"), " answered 503"),
    ((200, "# nothing here\n"), ": no DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE per GPU in "
                                "its metrics"),
    ((200, "DCGM_FI_DEV_FB_USED{ 1\n"), ": not Prometheus text ("),
])
def test_a_dcgm_exporter_that_cannot_answer_says_why(exporter: list[tuple[int, str]],
                                                     answer: tuple[int, str], said: str) -> None:
    exporter[0] = answer
    with pytest.raises(TelemetryUnavailable) as caught:
        DcgmTelemetry(_url(exporter)).read()
    assert str(caught.value).startswith(f"DCGM exporter at {_url(exporter)}{said}")


def test_an_unreachable_dcgm_exporter_is_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(TelemetryUnavailable) as caught:
        DcgmTelemetry(url).read()
    assert str(caught.value).startswith(f"DCGM exporter at {url}: ConnectError")


def test_a_streamed_sample_is_whole_and_in_index_order() -> None:
    """``nvidia-smi -lms`` prints a line per GPU per interval, nothing between samples (as a
    real H100 printed, ``tests/data/h100-telemetry``): lines group into whole samples, and a
    stream joined mid-sample re-aligns instead of pairing two samples' halves."""
    (line, *_) = (Path(__file__).resolve().parent.parent / "data" / "h100-telemetry" /
                  "nvidia-smi-loop.csv").read_text().splitlines()
    gpu1 = line.replace("0, GPU-8700", "1, GPU-9900", 1).replace(", 0, 81559", ", 512, 81559")
    samples = SmiSamples(2)
    got = [samples.add(x) for x in (gpu1, line, gpu1, line, gpu1)]  # joined at GPU 1
    assert got[:2] == [None, None]
    assert got[2] is not None
    assert [g.index for g in got[2]] == [0, 1]
    assert got[2][1].memory_used_mib == 512
    assert got[3] is None
    assert got[4] == got[2]
    assert SmiSamples(1).add("0, GPU-x, torn") is None  # a torn line is no sample
