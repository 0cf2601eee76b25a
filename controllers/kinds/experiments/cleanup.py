"""A run's cleanup: always runs, under one deadline, and proves what it claims.

Order: stop nothing is left to stop (caption readers end with their capture), delete every
stream the run may have registered in blocking batches and prove them gone from the listing,
prove no stream and no file is listed (the published listings), read the asset counts beyond
them (active caption requests; a count the unpublished asset stats do not give is "not measured
(why)", never zero and never a failure),
keep the service's log, then remove every container the Experiment owns (its service and its
publishers) and list again to prove none is left. GPU memory back at its start baseline is
recorded as "not measured" where there is no GPU telemetry — never as passed.
A leftover is a failed cleanup, named in the gate; nothing here raises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from controllers.clients.docker_client import DockerEngine
from controllers.clients.rtvi_client import RtviClient
from controllers.errors import ControllerError
from controllers.kinds.experiments import gpumemory, processes
from controllers.kinds.experiments.service import owned_containers, remove_containers
from controllers.kinds.experiments.streams import delete_proven
from controllers.waiting import Stopped
from state.evidence import Document
from state.keys import Key
from state.models import Owner


@dataclass(frozen=True)
class GpuProof:
    """The run's GPUs, their memory before the run, and how to read it now."""

    uuids: list[str]
    baseline: gpumemory.GpuMemory
    read: gpumemory.Reader | None


CLEANUP_FILE = "evidence/cleanup.json"
STOP_RESERVE_S = 5.0  # of the cleanup's deadline, kept for the steps after stopping containers


class GpuMemoryProof(Document):
    """GPU memory per UUID (MiB) before the run and after its cleanup, or why not measured."""

    baseline: dict[str, int] | str
    after: dict[str, int] | str


class CleanupEvidence(Document):
    """``evidence/cleanup.json`` (and the cleanup gate's evidence; a capacity window's
    ``residue``): what was left, each listing as read, what could not be measured. A part the
    cleanup did not reach is null."""

    processesLeft: list[str] | None = None
    streams: str | None = None  # why no service's streams were proven (none was running)
    streamsLeft: list[str] | None = None
    streamsListed: list[str] | None = None
    filesListed: list[str] | None = None
    assetStats: dict[str, Any] | None = None  # the service's own answer (unpublished shape)
    notMeasured: list[str] | None = None
    containersLeft: list[str] | None = None
    containersStopped: dict[str, str] | None = None  # per container: stopped in Ns, or killed
    gpuMemory: GpuMemoryProof | str | None = None
    problems: list[str] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict)  # per step: where the time went


@dataclass
class CleanupReport:
    problems: list[str] = field(default_factory=list)
    evidence: CleanupEvidence = field(default_factory=CleanupEvidence)

    @property
    def passed(self) -> bool:
        return not self.problems


def clean(engine: DockerEngine, instance: Owner, resource: Key,
          make_client: Callable[[], RtviClient] | None, stream_ids: list[str],
          containers: set[str], deadline_s: float, grace_s: int,
          stop: threading.Event, gpu: GpuProof | None = None,
          process_names: tuple[str, ...] = ()) -> CleanupReport:
    """``stream_ids``, ``containers`` and ``process_names``: what the run's inventory says it
    may have created."""
    report = CleanupReport()
    deadline = time.monotonic() + deadline_s
    step = _Steps(report.evidence.seconds)
    ended = [why for name in process_names if (why := processes.end(name))]
    report.problems += ended
    report.evidence.processesLeft = ended
    step.done("processes")
    if make_client is not None:
        service_residue(report, make_client, stream_ids, deadline, stop)
    else:
        report.evidence.streams = ("no service of the run is running (none started, or each "
                                      "was retired after proving its own streams gone)")
    step.done("service")
    # One deadline: a container that ignores SIGTERM is killed in time for the listing and
    # the GPU check to run within it, whatever grace its template allows a service.
    reserve = min(STOP_RESERVE_S, deadline_s / 4)
    report.evidence.containersStopped = {}
    left = remove_containers(engine, instance, resource, containers, grace_s,
                             report.evidence.containersStopped, deadline - reserve)
    step.done("containers")
    try:
        remaining = [c.name for c in owned_containers(engine, instance, resource)]
    except ControllerError as exc:
        remaining = [f"(cannot list containers: {exc})"]
    step.done("listing")
    report.problems += left + [f"container {name} still exists" for name in remaining
                               if not any(name in line for line in left)]
    report.evidence.containersLeft = remaining
    if gpu is None:
        report.evidence.gpuMemory = gpumemory.NO_GPU
    else:
        now, over = gpumemory.back_to_baseline(gpu.read, gpu.uuids, gpu.baseline,
                                               deadline - time.monotonic(), stop)
        report.evidence.gpuMemory = GpuMemoryProof(baseline=gpu.baseline.as_evidence(),
                                                   after=now.as_evidence())
        report.problems += over
    step.done("gpuMemory")
    if time.monotonic() > deadline:
        slowest = max(step.seconds, key=step.seconds.__getitem__)
        report.problems.append(f"cleanup took longer than its {deadline_s:g}s deadline "
                               f"({slowest}: {step.seconds[slowest]:.1f}s)")
    report.evidence.problems = report.problems
    return report


@dataclass
class _Steps:
    """Each cleanup step's seconds, kept in the evidence: a cleanup past its deadline says
    which step took the time (a container slow to stop, a listing that hung)."""

    seconds: dict[str, float]
    _mark: float = field(default_factory=time.monotonic)

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self._mark, 3)
        self._mark = now


def service_residue(report: CleanupReport, make_client: Callable[[], RtviClient],
                    stream_ids: list[str], deadline: float, stop: threading.Event) -> None:
    """Delete ``stream_ids`` and prove the service holds no stream, file or active request
    (each leftover a problem in ``report``); also a capacity window's zero-residue proof."""
    client = make_client()
    try:
        left = delete_proven(client, stream_ids, max(1.0, deadline - time.monotonic()), stop)
        report.problems += [f"stream {sid} is still registered (refused deletion)"
                            for sid in left]
        report.evidence.streamsLeft = left
        listed = [s.id for s in client.list_streams()]  # the run's own service: all of them
        report.evidence.streamsListed = listed
        if listed:
            report.problems.append(f"{len(listed)} stream(s) still listed: {', '.join(listed)}")
        files = client.list_files()
        report.evidence.filesListed = files
        if files:
            report.problems.append(f"{len(files)} file(s) left on the service")
        for what, count in _stats_counts(client, report).items():
            if count:
                report.problems.append(f"{count} {what} left on the service")
    except Stopped:
        raise
    except ControllerError as exc:
        report.problems.append(f"cannot prove the service's streams and assets are gone: {exc}")
    finally:
        client.close()


def _stats_counts(client: RtviClient, report: CleanupReport) -> dict[str, int]:
    """The counts ``/v1/assets/stats`` gives beyond the listings. Its shape is not published:
    what it does not report (or the endpoint itself, missing) is recorded as "not measured
    (why)" in the evidence, never taken for zero and never a failure; streams and files are
    proven by their published listings."""
    try:
        stats = client.asset_stats()
    except ControllerError as exc:
        report.evidence.notMeasured = [f"asset stats: {exc}"]
        return {}
    report.evidence.assetStats = stats
    counts = asset_counts(stats)
    report.evidence.notMeasured = [
        f"{what}: /v1/assets/stats does not report it (its shape is not published)"
        for what, count in counts.items() if count is None]
    return {what: count for what, count in counts.items() if count is not None}


def asset_counts(stats: dict[str, Any]) -> dict[str, int | None]:
    """Streams, files and active caption requests in an asset-stats answer (the shape is not
    published: a count that is missing is None, unknown, never taken for zero)."""
    def count(section: str, key: str) -> int | None:
        part = stats.get(section)
        value = part.get(key) if isinstance(part, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return {"stream(s)": count("streams", "count"), "file(s)": count("files", "count"),
            "active caption request(s)": count("caption_requests", "active")}
