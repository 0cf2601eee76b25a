"""One run, from launch to a sealed evidence folder: the phases, the record, the evidence.

``launch`` is called by a pass (it writes the record and creates the evidence folder, which
also claims the run ID); ``execute`` then does the long work beside the queue, moving the
record and ``status.json`` through Preflight → Running → Collecting → CleaningUp → Done.
``recover`` finishes a run that a crash or kill interrupted: INCONCLUSIVE, then its cleanup.

Rules held here, whatever happens inside a phase:

- The run works from what was frozen at launch (``RunPlan``), never from a later spec.
- Cleanup always runs once the run has started, with one deadline, and its proof is a gate.
- PASS only when every declared gate passed with evidence (``Evidence.finish`` enforces it);
  a run that could not judge its gates (the service never became ready, an API failed, the
  budget ran out) is INCONCLUSIVE, never FAIL or PASS.
- Shutdown (``Stopped``) leaves the run as it stands: the next start finds it interrupted.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from controllers import ownership
from controllers.clients.docker_client import DockerEngine
from controllers.clients.rtvi_client import RtviClient
from controllers.errors import ControllerError
from controllers.kinds.deployment.facts import RuntimeFacts
from controllers.kinds.deployment.plan import Desired
from controllers.kinds.experiments import gpumemory, processes
from controllers.kinds.experiments import report as bundle_report
from controllers.kinds.experiments.cleanup import CLEANUP_FILE, CleanupReport, GpuProof, clean
from controllers.kinds.experiments.facts import ExperimentStatusFacts, FrozenRun
from controllers.kinds.experiments.harnessproc import (
    ContainerLauncher,
    Launcher,
    LocalLauncher,
    OnHost,
)
from controllers.kinds.experiments.manifest import (
    CodeRef,
    GpuRef,
    HostRef,
    RunManifest,
    RuntimeStart,
    ServiceRef,
    Settings,
    TemplateRef,
    read_manifest,
    record_start,
)
from controllers.kinds.experiments.runtype import RunContext
from controllers.kinds.experiments.service import STOP_GRACE_CAP_S, RunService, guard, launch
from controllers.kinds.experiments.streams import (
    CanarySource,
    delete_proven,
    publish,
    stream_id,
)
from controllers.kinds.experiments.telemetry import EVIDENCE_FILE as TELEMETRY_FILE
from controllers.kinds.experiments.telemetry import RunTelemetry
from controllers.kinds.experiments.types import run_type
from controllers.kinds.host.gputelemetry import Telemetry
from controllers.kinds.streamset.publisher.run import publisher_name
from controllers.waiting import Stopped
from specs.experiment import ExperimentSpec
from specs.experiments.base import CanaryPublisher
from specs.models import Deployment
from state.evidence import MANIFEST, Evidence, EvidenceError, Verdict
from state.keys import Key
from state.models import HistoryEntry, InventoryItem, Owner, ResourceStatus, utc_now
from state.store import Store

log = structlog.get_logger("controllers.kinds.experiments")
GATE_CLEANUP = "cleanup"
KIND_STREAM = "stream"
KIND_CONTAINER = "container"
TERMINAL = "Done"
LOG_TAIL_LINES = 2000
RUNNER_LOG = "logs/runner.log"
RUNNER_LOG_BYTES = 4 << 20
CODE_ROOT = Path(__file__).resolve().parents[3]
GIT_TIMEOUT_S = 5


@dataclass(frozen=True)
class RunPlan:
    """Everything a run needs, frozen when it is launched."""

    resource: Key
    name: str
    spec: ExperimentSpec
    run_hash: str
    template: Deployment
    desired: Desired  # the run's own service container, resolved on its Host
    host: str
    gpu_ids: list[str]  # given to the run's container
    evidence_root: Path
    source_file: str
    revision: str | None
    # GPUs the service is given by other means (telemetry.gpus): watched, never requested.
    other_gpus: tuple[str, ...] = ()
    # The watched GPUs the Host's driver reports (its facts at planning): what a job's runner
    # may read telemetry from; an emulated or unseen GPU is never requested of the engine.
    host_gpus: tuple[str, ...] = ()
    # The code that planned the run, when it runs elsewhere (a job on its Host, whose image
    # holds no Git checkout): recorded in the manifest instead of what this process finds.
    code: CodeRef | None = None
    # A job's harness runs in a container on its Host (None: a process beside this run).
    harness_on_host: OnHost | None = None
    # The log of the process the run executes in, kept in the bundle as ``logs/runner.log``
    # before it is sealed (a job's; None in the reconciler, whose log is its state's).
    runner_log: Path | None = None
    # Other versions the run starts in its room, by name (its type's ``companions``),
    # resolved on its Host like ``desired``.
    companions: tuple[tuple[str, Desired], ...] = ()
    # Earlier runs it reads, by role (its type's ``earlier``): (role, run ID).
    earlier: tuple[tuple[str, str], ...] = ()

    @property
    def read_runs(self) -> list[str]:
        """Every earlier run whose evidence the run reads (its spec's, then its type's)."""
        return list(dict.fromkeys([*self.spec.read_runs(), *(run for _, run in self.earlier)]))

    @property
    def watched_gpus(self) -> list[str]:
        """Every GPU whose memory the run baselines and proves back after cleanup."""
        return list(dict.fromkeys([*self.gpu_ids, *self.other_gpus]))


class Recorder:
    """The run's progress, written to its record and to its evidence ``status.json``."""

    def __init__(self, store: Store, resource: Key, host: str, evidence: Evidence | None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.store, self.resource, self.evidence = store, resource, evidence
        self.host = host  # where the run's containers and streams live (their inventory)
        self.progress = progress

    def update(self, fn: Callable[[ResourceStatus], None]) -> None:
        self.store.update(self.resource, fn)

    def phase(self, phase: str, message: str, **facts: Any) -> None:
        def mutate(st: ResourceStatus) -> None:
            known = ExperimentStatusFacts.of(st)
            known.phase = phase
            for key, value in facts.items():
                setattr(known, key, value)
            known.put(st)
            st.set_condition("Ready", "False", "Running", f"{phase}: {message}")
            st.set_condition("Progressing", "True", phase, message)
        self.update(mutate)
        if self.evidence is not None:
            self.evidence.status(phase, "Running")
            self.evidence.event(phase, message)
        log.info("experiment.phase", resource=self.resource, phase=phase, message=message)
        if self.progress is not None:
            self.progress(f"{phase}: {message}")

    def streams(self, ids: list[str]) -> None:
        """Write-ahead: these streams may exist from now on (cleanup deletes every one)."""
        self._pending(KIND_STREAM, ids)

    def foreign(self, url: str) -> None:
        """Write-ahead: the run adds streams to the service at ``url``, which it does not own
        (its recovery deletes the run's noted streams there, and nothing else)."""
        def mutate(st: ResourceStatus) -> None:
            known = ExperimentStatusFacts.of(st)
            if url not in (known.foreign or []):
                known.foreign = [*(known.foreign or []), url]
                known.put(st)
        self.update(mutate)

    def processes(self, names: list[str]) -> None:
        """Write-ahead: these processes (``processes.name_of``) run for the run; cleanup
        ends every one still running as the same process."""
        self._pending(processes.KIND_PROCESS, names)

    def containers(self, names: list[str]) -> None:
        """Write-ahead: these containers may exist from now on (cleanup removes them, when
        they also carry the run's labels)."""
        self._pending(KIND_CONTAINER, names)

    def _pending(self, kind: str, names: list[str]) -> None:
        def mutate(st: ResourceStatus) -> None:
            for name in names:
                st.upsert_inventory(InventoryItem(kind=kind, name=name, host=self.host,
                                                  id=name if kind == KIND_STREAM else None,
                                                  state="pending", created_at=utc_now()))
        self.update(mutate)

    def finish(self, result: Verdict, reason: str, gates: dict[str, str], cleaned: bool) -> None:
        def mutate(st: ResourceStatus) -> None:
            known = ExperimentStatusFacts.of(st)
            known.phase, known.result, known.reason = TERMINAL, result, reason
            known.gates, known.finished_at = gates, utc_now()
            known.put(st)
            st.set_condition("Ready", "True" if result == "PASS" else "False", result, reason)
            st.set_condition("Progressing", "False", "Done", "")
            if cleaned:
                st.inventory = []
            st.add_history(HistoryEntry(time=utc_now(), action="run", target=known.run_id or "",
                                        cause="experiment run", result="ok" if result == "PASS"
                                        else "error", detail=f"{result}: {reason}"[:500]))
        self.update(mutate)


def launch_record(store: Store, plan: RunPlan) -> Evidence:
    """Claim the run ID (its evidence folder) and record the run as Pending."""
    evidence = Evidence.create(plan.evidence_root, plan.spec.runId)

    def mutate(st: ResourceStatus) -> None:
        st.desired_generation = st.observed_generation = plan.run_hash
        st.applied_revision = plan.revision
        st.source_file = plan.source_file
        st.applied_spec = {"experiment": plan.spec.model_dump(mode="json"),
                           "template": plan.template.spec.model_dump(mode="json")}
        st.inventory = []
        st.conditions = []
        ExperimentStatusFacts(
            run_id=plan.spec.runId, phase="Pending", template=plan.spec.template,
            host=plan.host, container=plan.desired.container_name, url=plan.desired.probe_url,
            evidence=str(evidence.folder), started_at=utc_now()).put(st)
        st.set_condition("Ready", "False", "Running", "Pending: launched")
        st.set_condition("Progressing", "True", "Pending", "launched")
    store.update(plan.resource, mutate)
    for sub in (plan.spec.paths.output, plan.spec.paths.scratch, plan.spec.paths.mutableCache):
        evidence.path(sub).mkdir(parents=True, exist_ok=True)  # the run's isolated paths
    evidence.status("Pending", "Running")
    evidence.event("Launched", f"run {plan.spec.runId} of {plan.resource}",
                   revision=plan.revision)
    return evidence


def execute(plan: RunPlan, engine: DockerEngine, store: Store, instance: Owner,
            stop: threading.Event, progress: Callable[[str], None],
            telemetry: Telemetry | None = None) -> Verdict:
    """The whole run; returns its result (raises Stopped on shutdown, leaving it resumable).
    ``telemetry``: the Host's GPU telemetry (baselines, the window's means, cleanup proof)."""
    if stop.is_set():  # stopped while queued: nothing was started, the recovery says why
        raise Stopped("the run was stopped before it started")
    evidence = Evidence.open(plan.evidence_root, plan.spec.runId)
    rec = Recorder(store, plan.resource, plan.host, evidence, progress)
    declared = [*run_type(plan.spec).declared_gates(plan.spec), GATE_CLEANUP]
    started: list[RunService] = []  # the run's service, once it serves
    result: Verdict = "INCONCLUSIVE"
    reason = ""
    baseline = gpumemory.GpuMemory(None, gpumemory.NO_GPU)
    gpu_read = gpumemory.reader(telemetry)
    tele = RunTelemetry(telemetry, plan.spec.telemetry,
                        why_not="the run ended before Preflight read it")
    try:
        rec.phase("Preflight", "container guard, GPU telemetry and memory baseline, manifest")
        conflict = guard(engine, plan.desired.container_name, instance, plan.resource,
                         plan.spec.runId)
        tele = RunTelemetry.preflight(telemetry, plan.spec.telemetry)
        baseline = gpumemory.measure(tele.memory_at_start if telemetry else None,
                                     plan.watched_gpus)
        evidence.write(MANIFEST, _manifest(plan, engine, store, baseline, tele))
        missing = tele.required_missing()
        if conflict is not None:
            reason = f"container guard: {conflict}"
            evidence.event("Conflict", conflict)
        elif missing is not None:
            result, reason = "FAIL", f"preflight: {missing}"
            evidence.event("TelemetryUnavailable", missing)
        else:
            with tele.sampling(stop):
                result, reason = _running(plan, engine, instance, stop, progress, rec,
                                          evidence, started, _gpus(plan, baseline, gpu_read))
    except Stopped:
        raise
    except ControllerError as exc:
        result, reason = "INCONCLUSIVE", f"{type(exc).__name__}: {exc}"
    service = started[-1] if started else None
    rec.phase("Collecting", "keeping the service's log")
    _keep_log(engine, evidence, service.container_id if service else
              plan.desired.container_name)  # a service that never became ready: why
    rec.phase("CleaningUp", f"one deadline of {plan.spec.cleanupSeconds}s")
    make = service.client if service else None
    gpu = _gpus(plan, baseline, gpu_read)
    cleaned = _cleanup(plan, engine, store, instance, stop, evidence, make, gpu)
    tele.finish()
    evidence.write(TELEMETRY_FILE, tele.evidence())
    if not cleaned and result == "PASS":
        result, reason = "FAIL", "cleanup could not prove zero leftovers"
    if not reason:
        reason = "every gate passed" if result == "PASS" else "a gate failed"
    keep_runner_log(evidence, plan.runner_log)
    return _finish(evidence, rec, result, declared, reason, cleaned)


def _running(plan: RunPlan, engine: DockerEngine, instance: Owner, stop: threading.Event,
             progress: Callable[[str], None], rec: Recorder, evidence: Evidence,
             started: list[RunService], gpu: GpuProof | None) -> tuple[Verdict, str]:
    """The Running phase: the type's own work, through a context that starts and retires
    the run's service and publishes sources (``started``: the service now serving; ``gpu``:
    the run's GPUs and their Preflight baseline)."""
    spec = plan.spec
    published: dict[str, str] = {}

    def start(desired: Desired, what: str, said: str = "") -> RunService:
        rec.phase("Running", f"starting {what} {desired.container_name}{said}")
        rec.containers([desired.container_name])
        service = launch(engine, desired, plan.gpu_ids,
                         float(plan.template.spec.readiness.timeoutSeconds), stop, progress)
        started.append(service)
        evidence.event("ServiceReady", f"{service.container_name} serves {service.model_id}",
                       container=service.container_id)
        return service

    def start_service(without: frozenset[str]) -> RunService:
        said = f" without {', '.join(sorted(without))}" if without else ""
        service = start(_without(plan.desired, without), "the run's service", said)
        _record_runtime(evidence, service, sorted(without),
                        engine.env_settings(service.container_id, RUNTIME_SETTINGS) or {})
        return service

    def start_companion(name: str) -> RunService:
        found = dict(plan.companions).get(name)
        if found is None:
            raise ControllerError(f"run {spec.runId} has no {name} service (a bug: please "
                                  "report it)")
        return start(found, f"the run's {name} service")

    def retire_service(service: RunService, name: str) -> None:
        _keep_log(engine, evidence, service.container_id, f"logs/{name}.log")
        engine.stop(service.container_id,
                    min(plan.template.spec.stopGraceSeconds, STOP_GRACE_CAP_S))
        engine.remove(service.container_id)
        started.remove(service)
        evidence.event("ServiceRetired", f"{service.container_name} removed; log kept as "
                       f"logs/{name}.log", container=service.container_id)

    def publish_sources(sources: list[CanarySource], shape: CanaryPublisher) -> dict[str, str]:
        new = [s for s in sources if s.name not in published]
        if new:
            rec.phase("Running", f"publishing {len(new)} source(s)")
            rec.containers([publisher_name(instance, plan.resource, s.name) for s in new])
            published.update(publish(engine, instance, plan.resource, plan.run_hash,
                                     spec.runId, new, shape, stop))
        return {s.name: published[s.name] for s in sources}

    ctx = RunContext(
        spec=spec, evidence=evidence, stop=stop,
        progress=lambda message: rec.phase("Running", message),
        launch=start_service, retire_service=retire_service, publish=publish_sources,
        note_streams=rec.streams, note_foreign=rec.foreign,
        env_names=lambda service: engine.env_names(service.container_id),
        launcher=_launcher(plan, engine, instance, stop, rec),
        gpu_back=lambda timeout_s: _gpu_back(gpu, timeout_s, stop),
        gpu_baseline=lambda: gpu.baseline.mib if gpu is not None else None,
        companion=start_companion, earlier=dict(plan.earlier),
        stream_id=lambda part, src: stream_id(instance, plan.resource, spec.runId, part, src))
    return run_type(spec).execute(ctx)


def _gpus(plan: RunPlan, baseline: gpumemory.GpuMemory, read: gpumemory.Reader | None
          ) -> GpuProof | None:
    return GpuProof(plan.watched_gpus, baseline, read) if plan.watched_gpus else None


def _gpu_back(gpu: GpuProof | None, timeout_s: float, stop: threading.Event
              ) -> tuple[dict[str, int] | str, list[str]]:
    if gpu is None:
        return gpumemory.NO_GPU, []
    now, over = gpumemory.back_to_baseline(gpu.read, gpu.uuids, gpu.baseline, timeout_s, stop)
    return now.as_evidence(), over


def _launcher(plan: RunPlan, engine: DockerEngine, instance: Owner, stop: threading.Event,
              rec: Recorder) -> Launcher:
    """Where the run's harness runs (``harnessproc``), recorded write-ahead either way."""
    on_host = plan.harness_on_host
    if on_host is None:
        return LocalLauncher(note=lambda name: rec.processes([name]))
    labels = ownership.labels_for(instance, plan.resource, plan.run_hash,
                                  run_id=plan.spec.runId)
    labels[ownership.LABEL_ROLE] = ownership.ROLE_HARNESS
    return ContainerLauncher(
        engine=engine, image=on_host.image, labels=labels,
        name_for=lambda part: ownership.container_name(
            instance, f"run-{plan.spec.runId}-harness-{part}".lower()),
        volume=(on_host.volume, on_host.mount), note=lambda name: rec.containers([name]),
        stop=stop)


def _without(desired: Desired, names: frozenset[str]) -> Desired:
    """The run's service without some of its template's variables and secrets (a port
    validation proves the model starts once ``HF_TOKEN`` is gone)."""
    if not names:
        return desired
    dep = desired.deployment
    spec = dep.spec.model_copy(update={
        "env": {k: v for k, v in dep.spec.env.items() if k not in names},
        "secrets": [s for s in dep.spec.secrets if s.name not in names]})
    return dataclasses.replace(desired, deployment=dep.model_copy(update={"spec": spec}),
                               env={k: v for k, v in desired.env.items() if k not in names})


def _cleanup(plan: RunPlan, engine: DockerEngine, store: Store, instance: Owner,
             stop: threading.Event, evidence: Evidence,
             make_client: Callable[[], RtviClient] | None, gpu: GpuProof | None) -> bool:
    record = store.load(plan.resource)
    ids, names = inventory_of(record)
    report = clean(engine, instance, plan.resource, make_client, ids, names,
                   float(plan.spec.cleanupSeconds), plan.template.spec.stopGraceSeconds, stop,
                   gpu, processes_of(record))
    _cleanup_gate(evidence, report)
    return report.passed


def _cleanup_gate(evidence: Evidence, report: CleanupReport) -> None:
    evidence.write(CLEANUP_FILE, report.evidence)
    memory = report.evidence.gpuMemory
    said = memory if isinstance(memory, str) else "back near its baseline"
    evidence.gate(GATE_CLEANUP, report.passed, "; ".join(report.problems) or (
        f"zero containers, streams, files and active requests left; GPU memory {said}"),
        report.evidence.model_dump(mode="json"))


def _finish(evidence: Evidence, rec: Recorder, result: Verdict, declared: list[str],
            reason: str, cleaned: bool) -> Verdict:
    final = evidence.finish(result, declared, reason)
    bundle_report.write(evidence, final, reason)
    gates = {n: f"{'PASS' if g.passed else 'FAIL'}: {g.reason}"
             for n, g in evidence.gates().items()}
    final_reason = reason if final == result else f"refused PASS: {reason}"
    rec.finish(final, final_reason, gates, cleaned)
    evidence.seal()
    return final


def recover(store: Store, record: ResourceStatus, engine: DockerEngine, instance: Owner,
            evidence_root: Path, stop: threading.Event, token: str | None,
            telemetry: Telemetry | None = None) -> Verdict:
    """A run the process lost (crash, kill -9): INCONCLUSIVE, after its cleanup."""
    known = ExperimentStatusFacts.of(record)
    assert known.run_id is not None
    try:
        evidence: Evidence | None = Evidence.open(evidence_root, known.run_id)
    except EvidenceError:
        evidence = None
    rec = Recorder(store, record.key, known.host or "unknown", evidence)
    why = known.reason or "the reconciler stopped while the run was under way"
    reason = f"interrupted during {known.phase or 'Pending'}: {why}; its cleanup ran after"
    rec.phase("CleaningUp", "the run was interrupted; cleaning up what it left")
    url = known.url
    make = (lambda: RtviClient(url, token=token)) if url else None
    service = engine.container(known.container) if known.container else None
    ids, names = inventory_of(record)
    deadline = float(FrozenRun.frozen(record).cleanup_seconds)
    if evidence is not None and known.container:  # before cleanup removes the container
        _keep_log(engine, evidence, known.container)
    report = clean(engine, instance, record.key,
                   make if service is not None and service.running else None, ids, names,
                   deadline, 10, stop, _recorded_gpus(evidence, gpumemory.reader(telemetry)),
                   processes_of(record))
    _foreign_streams(report, known.foreign or [], token, ids, deadline, stop)
    if evidence is None:
        rec.finish("INCONCLUSIVE", reason + " (its evidence folder is missing)", {},
                   report.passed)
        return "INCONCLUSIVE"
    evidence.event("Interrupted", reason)
    _cleanup_gate(evidence, report)
    if not report.passed:
        reason += "; cleanup left: " + "; ".join(report.problems)
    return _finish(evidence, rec, "INCONCLUSIVE", [GATE_CLEANUP], reason, report.passed)


def _foreign_streams(report: CleanupReport, urls: list[str], token: str | None,
                     ids: list[str], deadline_s: float, stop: threading.Event) -> None:
    """The run's noted streams deleted from the services it does not own (a promotion's
    running version, measured where it serves), each proven gone from that service's listing;
    the service's other streams are never listed as residue, nor touched."""
    for url in urls:
        client = RtviClient(url, token=token)
        try:
            left = delete_proven(client, ids, deadline_s, stop)
        except ControllerError as exc:
            report.problems.append(f"cannot prove the run's streams gone from {url}: {exc}")
            continue
        finally:
            client.close()
        report.problems += [f"stream {sid} is still registered on {url} (refused deletion)"
                            for sid in left]
        report.evidence.streamsLeft = [*(report.evidence.streamsLeft or []), *left]


def _recorded_gpus(evidence: Evidence | None, read: gpumemory.Reader | None
                   ) -> GpuProof | None:
    """The GPUs and baseline the run's manifest recorded (None: no GPU, or no manifest)."""
    manifest = read_manifest(evidence) if evidence is not None else None
    if manifest is None or not manifest.gpus.ids:
        return None
    uuids, base = manifest.gpus.ids, manifest.gpus.memoryBaselineMiB
    baseline = (gpumemory.GpuMemory(dict(base)) if isinstance(base, dict)
                else gpumemory.GpuMemory(None, base))
    return GpuProof([str(u) for u in uuids], baseline, read)


def processes_of(record: ResourceStatus | None) -> tuple[str, ...]:
    """The processes (``processes.name_of``) a run's inventory says it started."""
    items = record.inventory if record is not None else []
    return tuple(i.name for i in items if i.kind == processes.KIND_PROCESS)


def inventory_of(record: ResourceStatus | None) -> tuple[list[str], set[str]]:
    """(stream IDs, container names) a run's inventory says it may have created."""
    items = record.inventory if record is not None else []
    return ([i.name for i in items if i.kind == KIND_STREAM],
            {i.name for i in items if i.kind == KIND_CONTAINER})


def keep_runner_log(evidence: Evidence, source: Path | None) -> None:
    """``source`` (the job's own log, redacted where it was written; scrubbed again) as
    ``logs/runner.log``, its last ``RUNNER_LOG_BYTES``; nothing when there is none."""
    if source is None:
        return
    try:
        with open(source, "rb") as log:
            log.seek(max(0, log.seek(0, 2) - RUNNER_LOG_BYTES))
            evidence.write_text(RUNNER_LOG, log.read().decode("utf-8", "replace"))
    except OSError:
        return


def _keep_log(engine: DockerEngine, evidence: Evidence, container: str,
              relative: str = "logs/service.log") -> None:
    try:
        info = engine.container(container)
        if info is not None:
            evidence.write_text(relative, engine.logs(info.id, tail=LOG_TAIL_LINES))
    except ControllerError as exc:
        evidence.event("LogUnavailable", str(exc))


# Settings read back from the running container (never a secret's name): what the run's
# judgements compare (an EVS pair's VLLM_IGNORE_EOS), as the service really got them.
RUNTIME_SETTINGS = ("VLLM_IGNORE_EOS", "VIA_EVS_SESSION", "VLM_VIDEO_PRUNING_RATE",
                    "VLLM_EVS_SIMILARITY_THRESHOLD", "VIA_EVS_TOKEN_BUDGET",
                    "VLLM_ENABLE_PREFIX_CACHING", "VLLM_DISABLE_MM_PREPROCESSOR_CACHE",
                    "ENABLE_REQUEST_PROFILING")


def _record_runtime(evidence: Evidence, service: RunService, without: list[str],
                    settings: dict[str, str]) -> None:
    """What the running service reported at start-up, never the spec's requested values in
    its place: each start's facts go to ``evidence/runtime.json``, and the first start's into
    the manifest's ``runtime`` (a fact the logs did not give is listed as not reported)."""
    facts = RuntimeFacts.model_validate(service.runtime).model_dump(exclude_none=True)
    record_start(evidence, RuntimeStart(
        container=service.container_name, without=without, reported=facts,
        notReported=[k for k in RuntimeFacts.model_fields if k not in facts],
        environment={name: settings.get(name, "unset") for name in RUNTIME_SETTINGS}))


def _manifest(plan: RunPlan, engine: DockerEngine, store: Store,
              baseline: gpumemory.GpuMemory, tele: RunTelemetry) -> RunManifest:
    env = plan.desired.env
    host_record = store.load(Key("Host", plan.host))
    image = engine.image(plan.desired.image_id)
    return RunManifest(
        runId=plan.spec.runId, experiment=plan.resource, specHash=plan.run_hash,
        spec=plan.spec.model_dump(mode="json"), specRevision=plan.revision,
        sourceFile=plan.source_file,
        template=TemplateRef(name=plan.spec.template,
                             spec=plan.template.spec.model_dump(mode="json")),
        service=ServiceRef(container=plan.desired.container_name,
                           image=plan.template.spec.image, imageId=plan.desired.image_id,
                           imageDigests=list(image.repo_digests) if image is not None else [],
                           labels=plan.desired.labels, url=plan.desired.url),
        model=plan.template.spec.model.model_dump(mode="json"),
        host=HostRef(name=plan.host, facts=host_record.facts if host_record else {}),
        gpus=GpuRef(ids=plan.watched_gpus, memoryBaselineMiB=baseline.as_evidence(),
                    telemetry=tele.source_name or f"not measured ({tele.why_not})"),
        settings=Settings(VLLM_IGNORE_EOS=env.get("VLLM_IGNORE_EOS", "unset"),
                          evs={k: v for k, v in sorted(env.items()) if "EVS" in k.upper()}),
        code=plan.code or code_ref(),
        createdAt=utc_now())


def code_ref() -> CodeRef:
    """This process's code: the installed version and the checkout's commit."""
    return CodeRef(version=_version(), revision=_code_revision())


def _version() -> str:
    try:
        return importlib.metadata.version("rtvi-reconciler")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _code_revision() -> str:
    """The commit of the code that ran the experiment (``unknown`` outside a Git checkout)."""
    try:
        done = subprocess.run(["git", "-C", str(CODE_ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"
