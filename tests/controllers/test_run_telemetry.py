"""A run's telemetry evidence: Preflight's read, the window, the reading after cleanup, and
"not measured (why)" wherever a reading is missing. The readings replayed here are the ones a
real H200 gave (``tests/data/h200-telemetry``)."""

from __future__ import annotations

import ctypes.util
import json
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from controllers.kinds.experiments import gpumemory
from controllers.kinds.experiments.telemetry import NO_SOURCE, RunTelemetry
from controllers.kinds.host.gputelemetry import (
    DcgmTelemetry,
    SmiTelemetry,
    Snapshot,
    TelemetryUnavailable,
)
from controllers.kinds.host.session import HostSession
from controllers.waiting import until
from specs.models import TelemetrySpec
from specs.validate import parse_text
from tests.controllers.h200 import DATA, UUID
from tests.controllers.h200 import snapshot as _snap
from tests.specs.cases import HEADER, body


class Replay:
    """Gives the H200's recorded readings in order (idle, under load..., idle), then fails."""

    name = "nvml"

    def __init__(self, fail_after: int | None = None) -> None:
        record = json.loads((DATA / "nvml-window.json").read_text())
        self.readings = [_snap(record["before"]), *(_snap(s) for s in record["during"]),
                         _snap(record["after"])]
        self.calls = 0
        self.fail_after = fail_after
        self.lock = threading.Lock()

    def read(self) -> Snapshot:
        with self.lock:
            self.calls += 1
            if self.fail_after is not None and self.calls > self.fail_after:
                raise TelemetryUnavailable("NVML: Unknown Error")
            return self.readings[min(self.calls - 1, len(self.readings) - 1)]


def test_a_readable_source_gives_start_window_and_end() -> None:
    source = Replay()
    run = RunTelemetry.preflight(source, TelemetrySpec(intervalSeconds=0.1))
    assert run.start is not None
    assert run.required_missing() is None
    with run.sampling(threading.Event()):
        assert until(lambda: True if run.sampler and len(run.sampler.snapshots) >= 3 else None,
                     timeout_s=20, pace=0.02)
    run.finish()
    said = run.evidence().model_dump(mode="json")
    assert said["source"] == "nvml"
    assert said["required"] is False
    assert said["start"]["gpus"][UUID] == {"index": 0, "memoryUsedMiB": 0,
                                           "memoryTotalMiB": 143771, "utilizationPct": 0.0}
    window = said["window"][UUID]
    assert window["samples"] >= 3
    assert window["memory_max_mib"] > 9000
    assert window["utilization_mean_pct"] is not None
    assert said["failures"] == []
    assert said["end"]["gpus"][UUID]["memoryUsedMiB"] >= 0
    readings = said["series"]["readings"]
    assert said["series"]["fields"] == ["memoryUsedMiB", "utilizationPct"]
    assert len(readings) == window["samples"]
    assert max(r["gpus"][UUID][0] for r in readings) == window["memory_max_mib"]


def test_no_source_is_not_measured_everywhere_and_fails_a_run_that_requires_it() -> None:
    optional = RunTelemetry.preflight(None, TelemetrySpec())
    assert optional.required_missing() is None
    with optional.sampling(threading.Event()):
        assert optional.sampler is None
    optional.finish()
    said = optional.evidence().model_dump(mode="json")
    why = f"not measured ({NO_SOURCE})"
    assert (said["source"], said["start"], said["window"], said["end"]) == (None, why, why, why)
    required = RunTelemetry.preflight(None, TelemetrySpec(required=True))
    assert required.required_missing() == (f"required GPU telemetry cannot be read: "
                                           f"{NO_SOURCE}")


def test_an_unreadable_source_names_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    run = RunTelemetry.preflight(SmiTelemetry(where="Host gpu-1"), TelemetrySpec(required=True))
    assert run.required_missing() == ("required GPU telemetry cannot be read: nvidia-smi on "
                                      "Host gpu-1 exited 127: nvidia-smi: not found")
    assert run.evidence().start == ("not measured (nvidia-smi on Host gpu-1 exited 127: "
                                       "nvidia-smi: not found)")


def test_failures_during_the_window_and_after_cleanup_are_reasons() -> None:
    source = Replay(fail_after=1)  # Preflight reads; nothing after
    run = RunTelemetry.preflight(source, TelemetrySpec(intervalSeconds=0.1))
    with run.sampling(threading.Event()):
        assert until(lambda: True if run.sampler and run.sampler.failures else None,
                     timeout_s=20, pace=0.02)
    run.finish()
    said = run.evidence().model_dump(mode="json")
    assert said["window"] == "not measured (no reading succeeded during the run)"
    assert said["failures"][0] == "NVML: Unknown Error"
    assert said["end"] == "not measured (NVML: Unknown Error)"


def test_the_memory_baseline_is_preflights_reading_not_another() -> None:
    source = Replay()
    run = RunTelemetry.preflight(source, TelemetrySpec())
    assert run.memory_at_start() == {UUID: 0}
    assert source.calls == 1
    assert gpumemory.measure(run.memory_at_start, [UUID]).mib == {UUID: 0}
    unread = RunTelemetry.preflight(Replay(fail_after=0), TelemetrySpec())
    assert gpumemory.measure(unread.memory_at_start, [UUID]).why_not == (
        "not measured (NVML: Unknown Error)")


def test_a_run_that_never_measured_says_so() -> None:
    run = RunTelemetry.preflight(Replay(), TelemetrySpec())
    assert run.evidence().window == ("not measured (the run did not reach its measuring "
                                        "phase)")


def test_gpu_memory_of_a_gpu_the_telemetry_does_not_see_is_not_measured() -> None:
    read = gpumemory.reader(Replay())
    assert gpumemory.measure(read, [UUID]).mib == {UUID: 0}
    unseen = gpumemory.measure(gpumemory.reader(Replay()), [UUID, "GPU-other"])
    assert unseen.mib is None
    assert unseen.why_not == "not measured (the telemetry does not report GPU GPU-other)"
    assert gpumemory.reader(None) is None


@pytest.mark.parametrize("url", ["http://user:pw@dcgm:9400/metrics", "ftp://dcgm/metrics",
                                 "http://dcgm:9400/metrics with space"])
def test_a_dcgm_url_is_a_plain_http_url_without_credentials(url: str) -> None:
    with pytest.raises(ValidationError):
        TelemetrySpec(dcgmUrl=url)
    assert TelemetrySpec(dcgmUrl="http://127.0.0.1:9400/metrics").dcgmUrl is not None


@pytest.mark.parametrize("interval", [0.05, 61])
def test_the_sampling_interval_is_bounded(interval: float) -> None:
    with pytest.raises(ValidationError):
        TelemetrySpec(intervalSeconds=interval)


def test_the_host_session_picks_the_source(tmp_path: Path) -> None:
    spec_set = parse_text(HEADER + body())
    host = spec_set.host("local")
    assert host is not None
    session = HostSession(host, tmp_path)
    exporter = session.telemetry("http://127.0.0.1:9400/metrics")
    assert isinstance(exporter, DcgmTelemetry)
    assert exporter.url == "http://127.0.0.1:9400/metrics"
    local = session.telemetry()
    if ctypes.util.find_library("nvidia-ml") is None:  # no GPU driver here: nvidia-smi
        assert isinstance(local, SmiTelemetry)
        assert local.where == "Host local"
    else:  # pragma: no cover - a GPU machine
        assert local.name in ("nvml", "nvidia-smi")
