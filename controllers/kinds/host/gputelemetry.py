"""GPU telemetry of a Host: memory and utilisation per GPU, from whichever source reaches it.

Why three sources (issue 12, ``rules.md``): an experiment's evidence needs GPU memory and
utilisation baselines at start and end (the cleanup proof) and means during its windows.
  - **NVML** (``nvidia-ml-py``, NVIDIA's own bindings) when the reconciler runs on the GPU
    host: no process per sample, and the same counters ``nvidia-smi`` prints.
  - **nvidia-smi** over the Host's SSH connection otherwise (or locally without NVML): the CSV
    query the field guides use.
  - **DCGM exporter** (Prometheus text) when the spec names a URL: the fleet's own monitoring.
Each source answers the same :class:`Snapshot`, so nothing above this module knows which one
was used; the source's name is recorded with the evidence. A source that cannot answer raises
:class:`TelemetryUnavailable` with the reason: a caller records "not measured (reason)", never
a zero. Utilisation a source does not report (``[N/A]`` on some MIG set-ups) is None.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import structlog

from controllers.clients import httpclients
from controllers.errors import ControllerError, TemporaryError
from controllers.kinds.host.gpus import NVIDIA_SMI, run_local
from controllers.waiting import Stopped, until

SMI_QUERY = "index,uuid,memory.used,memory.total,utilization.gpu"
SMI_ARGS = [f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
HTTP_TIMEOUT_S = 5.0
MIB = 1024 * 1024
# DCGM exporter field names (dcgm-exporter's default counters): framebuffer in MiB, util in %.
DCGM_USED, DCGM_FREE, DCGM_RESERVED = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", \
    "DCGM_FI_DEV_FB_RESERVED"
DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# A remote stream's sample is stale after this many intervals (at least the minimum), and the
# stream stops after this many intervals without a reader.
STREAM_STALE_SAMPLES, STREAM_STALE_MIN_S = 3, 5.0
STREAM_IDLE_SAMPLES, STREAM_IDLE_MIN_S = 10, 30.0
STREAM_MIN_MS = 100
NOT_REPORTED = ("[N/A]", "N/A", "[Not Supported]", "")
Runner = Callable[[list[str]], tuple[int, str, str]]
log = structlog.get_logger("controllers.kinds.host.gputelemetry")


class TelemetryUnavailable(TemporaryError):
    """The source could not be read; the message says which source and why."""


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str
    memory_used_mib: int
    memory_total_mib: int
    utilization_pct: float | None  # None: the source does not report it for this GPU


@dataclass(frozen=True)
class Snapshot:
    source: str  # "nvml", "nvidia-smi" or "dcgm"
    at: float  # unix time
    gpus: tuple[GpuReading, ...]

    def by_uuid(self) -> dict[str, GpuReading]:
        return {g.uuid: g for g in self.gpus}


class Telemetry(Protocol):
    name: str

    def read(self) -> Snapshot:
        """One reading of every GPU; TelemetryUnavailable when the source cannot answer."""
        ...


# --- nvidia-smi ---------------------------------------------------------------------------------

def _number(cell: str, what: str, line: str) -> float | None:
    if cell in NOT_REPORTED:
        return None
    try:
        value = float(cell)
    except ValueError:
        raise TelemetryUnavailable(f"nvidia-smi: {what} is {cell!r} in line {line!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TelemetryUnavailable(f"nvidia-smi: {what} is {cell!r} in line {line!r}")
    return value


def parse_smi(text: str) -> tuple[GpuReading, ...]:
    """``nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,utilization.gpu
    --format=csv,noheader,nounits``; a line that is not a GPU row is an error, not a GPU less."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(SMI_QUERY.split(",")) or not cells[0].isdigit() \
                or not cells[1].startswith(("GPU-", "MIG-")):
            raise TelemetryUnavailable(f"nvidia-smi: unexpected line {line.strip()!r}")
        used = _number(cells[2], "memory.used", line)
        total = _number(cells[3], "memory.total", line)
        if used is None or total is None:
            raise TelemetryUnavailable(f"nvidia-smi: no memory figures in line {line.strip()!r}")
        gpus.append(GpuReading(int(cells[0]), cells[1], int(used), int(total),
                               _number(cells[4], "utilization.gpu", line)))
    return tuple(gpus)


@dataclass
class SmiTelemetry:
    """``nvidia-smi`` run by ``runner`` (locally, or over the Host's SSH connection)."""

    runner: Runner = run_local
    where: str = "this machine"
    program: str = NVIDIA_SMI  # found on the Host's PATH
    name: str = "nvidia-smi"

    def read(self) -> Snapshot:
        try:
            status, out, err = self.runner([self.program, *SMI_ARGS])
        except ControllerError as exc:  # the Host's connection: unreachable, timed out
            raise TelemetryUnavailable(f"nvidia-smi on {self.where}: {exc}") from None
        if status != 0:
            detail = (err.strip() or out.strip()).splitlines()
            raise TelemetryUnavailable(f"nvidia-smi on {self.where} exited {status}: "
                                       f"{detail[-1] if detail else 'no output'}")
        return Snapshot(self.name, time.time(), parse_smi(out))


class SmiSamples:
    """Whole samples out of ``nvidia-smi -lms`` lines: ``size`` lines (one per GPU, in index
    order) make one; a torn or out-of-step group is dropped and the next line starts afresh."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pending: list[str] = []

    def add(self, line: str) -> tuple[GpuReading, ...] | None:
        self._pending.append(line if line.endswith("\n") else line + "\n")
        if len(self._pending) < self.size:
            return None
        lines, self._pending = self._pending, []
        try:
            gpus = parse_smi("".join(lines))
        except TelemetryUnavailable:
            return None
        indices = [g.index for g in gpus]
        if indices == sorted(set(indices)):
            return gpus
        self._pending = lines[1:]  # started mid-sample: shift by a line and try again
        return None


class LineStream(Protocol):
    """A remote command printing as it goes (``SshTunnel.stream``'s answer)."""

    @property
    def ended(self) -> bool: ...

    def why_ended(self) -> str: ...

    def close(self) -> None: ...


StartStream = Callable[[list[str], Callable[[str], None]], LineStream]


class SmiStream:
    """``nvidia-smi`` on a remote Host printing a sample every interval itself (``-lms``) over
    one SSH channel, instead of one command over the connection per sample (the perf field
    guide's rule, issue 27). A read returns the newest whole sample the stream printed.

    Why a one-shot read first: it answers at once (a Preflight baseline waits for no
    interval), says an unusable ``nvidia-smi`` in its own words, and tells how many lines (GPUs)
    make one sample of the stream. The stream stops by itself once nobody has read for
    ``idle_s`` (a run ended, crashed or moved on), so no remote loop outlives its reader; the
    next read starts it again. A stream that ended (a dropped connection) is started again by
    the next read, the same way."""

    name = "nvidia-smi"

    def __init__(self, start: StartStream, once: Runner, interval_s: float, where: str,
                 program: str = NVIDIA_SMI, idle_s: float | None = None) -> None:
        self._start, self._once = start, SmiTelemetry(once, where, program)
        self.interval_s, self.where, self.program = interval_s, where, program
        self.idle_s = idle_s if idle_s is not None else max(STREAM_IDLE_MIN_S,
                                                             STREAM_IDLE_SAMPLES * interval_s)
        self._lock = threading.Lock()
        self._stream: LineStream | None = None
        self._samples = SmiSamples(0)
        self._newest: Snapshot | None = None
        self._read_at = 0.0  # monotonic
        self._said_why = False

    def read(self) -> Snapshot:
        with self._lock:
            self._read_at = time.monotonic()
            stream, newest = self._stream, self._newest
            if stream is not None and not stream.ended:
                if newest is not None and time.time() - newest.at <= self._stale_s():
                    return newest  # the stream's, or the one-shot's while it warms up
                stream.close()  # it prints nothing (a hung nvidia-smi): start afresh
                self._stream = None
            elif stream is not None and not self._said_why:  # it ended by itself: say why
                log.warning("telemetry.stream_ended", where=self.where, why=stream.why_ended())
                self._said_why = True  # once; each read starts it again
        snap = self._once.read()  # raises TelemetryUnavailable in nvidia-smi's own words
        with self._lock:
            if self._stream is None or self._stream.ended:
                self._samples, self._newest = SmiSamples(len(snap.gpus)), snap
                ms = max(STREAM_MIN_MS, round(self.interval_s * 1000))
                self._stream = self._start([self.program, *SMI_ARGS, "-lms", str(ms)],
                                           self._line)
        return snap

    def _stale_s(self) -> float:
        return max(STREAM_STALE_MIN_S, STREAM_STALE_SAMPLES * self.interval_s)

    def _line(self, line: str) -> None:
        """One line of the stream, on the SSH thread."""
        with self._lock:
            stream = self._stream
            if time.monotonic() - self._read_at > self.idle_s and stream is not None:
                stream.close()  # nobody reads: stop the loop on the Host
                self._stream = None
                return
            gpus = self._samples.add(line)
            if gpus is not None:
                self._newest = Snapshot(self.name, time.time(), gpus)

    def close(self) -> None:
        with self._lock:
            if self._stream is not None:
                self._stream.close()
                self._stream = None


# --- NVML ---------------------------------------------------------------------------------------

def _nvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py: loads libnvidia-ml.so only at nvmlInit
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise TelemetryUnavailable(f"NVML: nvidia-ml-py is not installed ({exc})") from None
    return pynvml


@dataclass
class NvmlTelemetry:
    """NVML of this machine. Initialised on first read; ``close`` shuts it down."""

    name: str = "nvml"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _ready: bool = False

    def read(self) -> Snapshot:
        nvml = _nvml()
        with self._lock:
            try:
                if not self._ready:
                    nvml.nvmlInit()
                    self._ready = True
                gpus = []
                for index in range(nvml.nvmlDeviceGetCount()):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    memory = _memory(nvml, handle)
                    gpus.append(GpuReading(index, _text(nvml.nvmlDeviceGetUUID(handle)),
                                           int(memory.used) // MIB, int(memory.total) // MIB,
                                           _utilization(nvml, handle)))
            except nvml.NVMLError as exc:
                raise TelemetryUnavailable(f"NVML: {exc}") from None
        return Snapshot(self.name, time.time(), tuple(gpus))

    def close(self) -> None:
        with self._lock:
            if self._ready:
                nvml = _nvml()
                with contextlib.suppress(nvml.NVMLError):  # nothing left to release
                    nvml.nvmlShutdown()
                self._ready = False


def _memory(nvml: Any, handle: Any) -> Any:
    """Memory as ``nvidia-smi`` counts it: version 2 leaves the driver's reservation out of
    ``used`` (on an idle H200, version 1 says 615 MiB used where nvidia-smi says 0), so a
    baseline means the same whichever source took it. Drivers before version 2 answer v1."""
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    except nvml.NVMLError_FunctionNotFound:
        return nvml.nvmlDeviceGetMemoryInfo(handle)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _utilization(nvml: Any, handle: Any) -> float | None:
    try:
        return float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except nvml.NVMLError_NotSupported:
        return None


def nvml_answers() -> str | None:
    """None when NVML works on this machine; else why not (no driver, no GPU)."""
    probe = NvmlTelemetry()
    try:
        snapshot = probe.read()
    except TelemetryUnavailable as exc:
        return str(exc)
    finally:
        probe.close()
    return None if snapshot.gpus else "NVML: no GPU on this machine"


# --- DCGM exporter (Prometheus) -----------------------------------------------------------------

def parse_dcgm(text: str) -> tuple[GpuReading, ...]:
    """The DCGM exporter's Prometheus text: framebuffer used/free/reserved (MiB) and GPU
    utilisation (%) per ``UUID`` label. A GPU without a framebuffer figure is not reported."""
    fields: dict[str, dict[str, float]] = {}
    index: dict[str, int] = {}
    try:
        from prometheus_client.parser import text_string_to_metric_families  # DCGM only

        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                uuid = sample.labels.get("UUID") or sample.labels.get("uuid")
                if not uuid or sample.name not in (DCGM_USED, DCGM_FREE, DCGM_RESERVED,
                                                   DCGM_UTIL):
                    continue
                fields.setdefault(uuid, {})[sample.name] = float(sample.value)
                gpu = sample.labels.get("gpu", "")
                if gpu.isdigit():
                    index[uuid] = int(gpu)
    except ValueError as exc:
        raise TelemetryUnavailable(f"not Prometheus text ({exc})") from None
    gpus = []
    for uuid, got in fields.items():
        if DCGM_USED not in got or DCGM_FREE not in got:
            continue
        total = got[DCGM_USED] + got[DCGM_FREE] + got.get(DCGM_RESERVED, 0.0)
        gpus.append(GpuReading(index.get(uuid, -1), uuid, int(got[DCGM_USED]), int(total),
                               got.get(DCGM_UTIL)))
    return tuple(sorted(gpus, key=lambda g: (g.index, g.uuid)))


@dataclass
class DcgmTelemetry:
    """A DCGM exporter's ``/metrics`` URL (as the spec names it)."""

    url: str
    name: str = "dcgm"

    def read(self) -> Snapshot:
        try:
            with httpclients.client(HTTP_TIMEOUT_S) as http:  # the shared TLS context
                response = http.get(self.url)
        except httpx.HTTPError as exc:
            raise TelemetryUnavailable(f"DCGM exporter at {self.url}: "
                                       f"{type(exc).__name__}: {exc}") from None
        if response.status_code != httpx.codes.OK:
            raise TelemetryUnavailable(f"DCGM exporter at {self.url} answered "
                                       f"{response.status_code}")
        try:
            gpus = parse_dcgm(response.text)
        except TelemetryUnavailable as exc:
            raise TelemetryUnavailable(f"DCGM exporter at {self.url}: {exc}") from None
        if not gpus:
            raise TelemetryUnavailable(f"DCGM exporter at {self.url}: no {DCGM_USED} and "
                                       f"{DCGM_FREE} per GPU in its metrics")
        return Snapshot(self.name, time.time(), gpus)


# --- windows ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuWindow:
    """One GPU over a window: what the evidence records."""

    uuid: str
    samples: int
    memory_mean_mib: float
    memory_max_mib: int
    utilization_mean_pct: float | None  # None: never reported in the window


def summarise(snapshots: Sequence[Snapshot]) -> dict[str, GpuWindow]:
    """Means (and the memory peak) per GPU over the snapshots of one window."""
    per: dict[str, list[GpuReading]] = {}
    for snap in snapshots:
        for gpu in snap.gpus:
            per.setdefault(gpu.uuid, []).append(gpu)
    out = {}
    for uuid, readings in per.items():
        utils = [r.utilization_pct for r in readings if r.utilization_pct is not None]
        out[uuid] = GpuWindow(uuid, len(readings),
                              sum(r.memory_used_mib for r in readings) / len(readings),
                              max(r.memory_used_mib for r in readings),
                              sum(utils) / len(utils) if utils else None)
    return out


class Sampler:
    """Reads a source every ``interval_s`` on a thread while a window lasts (``with``); a
    failed read is counted and kept as a reason, never recorded as a zero."""

    def __init__(self, source: Telemetry, interval_s: float,
                 stop: threading.Event | None = None) -> None:
        self.source, self.interval_s = source, interval_s
        self.snapshots: list[Snapshot] = []
        self.failures: list[str] = []
        self._done = threading.Event()
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()
        self._sample()  # the window's end is read too: a short window is not only its start

    def _sample(self) -> bool | None:
        if self._stop is not None and self._stop.is_set():
            return True  # the reconciler is stopping: the window ends with what it has
        try:
            self.snapshots.append(self.source.read())
        except TelemetryUnavailable as exc:
            self.failures.append(str(exc))
        return None

    def _run(self) -> None:
        # Paced by tenacity; the window's end (``_done``) cuts the pause short.
        with contextlib.suppress(Stopped):
            until(self._sample, timeout_s=math.inf, pace=self.interval_s, stop=self._done)

    def window(self) -> dict[str, GpuWindow]:
        return summarise(self.snapshots)
