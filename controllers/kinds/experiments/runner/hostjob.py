"""The reconciler's side of a run that executes as a job on its Host (``executor: host``).

``start`` makes the job: a labelled volume for the job folder, the runner container (the runner
image, the Host's network and Docker socket, the volume at ``/job``), the frozen plan written
into it through the archive API, the secrets' values sent once on its stdin. ``follow`` then
watches it from here, never needing to stay connected: every few seconds it copies the job's
record out and mirrors it into this reconciler's record (phase, gates, and the write-ahead
inventory a recovery needs), and when the runner has exited it brings the sealed bundle home
into ``evidenceRoot``, verifies every checksum there, and removes the runner and its volume.

What ends a follow, and what it leaves:
  - the process shuts down (SIGTERM, a lost SSH connection is only a failed read): ``Stopped``,
    the job runs on; the next start finds it by its labels (``find``) and follows it again;
  - the run is aborted (spec removed, budget backstop): the runner is stopped (SIGTERM: the
    run stops at its next wait), then as below;
  - the runner ended without a verdict (stopped, killed, died): its last record and partial
    evidence are brought home, the runner is removed, and ``RunnerEnded`` tells the caller to
    recover the run here (INCONCLUSIVE, its cleanup proven), as for an in-process run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo, ContainerRequest, DockerEngine
from controllers.errors import ControllerError, PermanentError, TemporaryError
from controllers.kinds.experiments.facts import ExperimentStatusFacts
from controllers.kinds.experiments.harnessproc import read_only_binds
from controllers.kinds.experiments.run import RUNNER_LOG, RunPlan
from controllers.kinds.experiments.runner import job as jobs
from controllers.kinds.experiments.runner.image import ensure_runner_image
from controllers.kinds.streamset.publisher.image import ensure_publisher_image
from controllers.waiting import Stopped, until
from specs.models import Host
from specs.trust import read_marks
from state.evidence import MANIFEST, Evidence, EvidenceError, Verdict, verify
from state.keys import Key
from state.models import Owner, ResourceStatus
from state.redaction import DEFAULT_REDACTOR
from state.store import Store

LABEL_ROLE, ROLE_RUNNER = ownership.LABEL_ROLE, ownership.ROLE_RUNNER
DOCKER_SOCKET = "/var/run/docker.sock"
FOLLOW_PACE_S = 1.0
FOLLOWED_EVERY_S = 15.0  # an unchanged job record is mirrored this often (``followed_at``)
STOP_MARGIN_S = 30  # the runner's SIGTERM grace beyond its cleanup deadline
JOB_READS = ("media", "harness")  # the trust categories a job reads on its Host
EARLIER_MAX_BYTES = 8 << 20  # one evidence document of an earlier run, copied into a job
RUNNER_LOG_LINES = 2000  # of a runner that ended without a verdict, kept in its bundle
GPU_READ_ONLY = ("gpu", "utility")  # the runner's GPU capabilities: counters, no compute
ERROR_CHARS = 300  # of the runner's last error, in the reason
log = structlog.get_logger("controllers.kinds.experiments")


class RunnerEnded(ControllerError):
    """The runner exited without a verdict: recover the run here (its reason says why)."""


@dataclass(frozen=True)
class Job:
    container_id: str
    name: str  # the runner container's, and its volume's


def socket_on(host: Host) -> str:
    """The Host's Docker socket as the Host itself sees it (what the runner mounts)."""
    if host.spec.ssh is not None and host.is_ssh:
        return str(host.spec.ssh.socket)
    return urlsplit(host.spec.docker).path or DOCKER_SOCKET


def job_name(instance: str, run_id: str) -> str:
    return ownership.container_name(instance, f"run-{run_id}".lower())


def _labels(instance: Owner, resource: Key, run_hash: str, run_id: str) -> dict[str, str]:
    labels = ownership.labels_for(instance, resource, run_hash, run_id=run_id)
    labels[LABEL_ROLE] = ROLE_RUNNER
    return labels


def start(engine: DockerEngine, plan: RunPlan, instance: Owner, socket_path: str,
          secrets: dict[str, str]) -> Job:
    """Create and start the run's job on ``engine``; ``socket_path`` is the engine's socket as
    the Host sees it. The secrets' values go to its stdin only."""
    run_id = plan.spec.runId
    name = job_name(instance, run_id)
    labels = _labels(instance, plan.resource, plan.run_hash, run_id)
    image_id = ensure_runner_image(engine)
    engine.create_volume(name, labels)
    try:
        container_id = engine.create(runner_request(plan, name, image_id, labels,
                                                    socket_path))
    except ControllerError as exc:
        with contextlib.suppress(ControllerError):
            engine.remove_volume(name)
        raise PermanentError(f"cannot create the run's job on Host {plan.host}: {exc} (a "
                             "job reads its media and harness files on its Host: they must "
                             "be there, at the paths the spec names; it reads the GPUs the "
                             "Host reports through NVIDIA's container toolkit)") from None
    job = Job(container_id, name)
    try:
        publisher = ensure_publisher_image(engine)  # put here: the runner has no GStreamer
        frozen = jobs.freeze(plan, instance, publisher, image_id, name).model_dump_json(
            ).encode()
        engine.put_file(container_id, str(jobs.JOB_DIR), jobs.PLAN_FILE, frozen)
        for relative, data in earlier_evidence(plan):
            engine.put_file(container_id, str(jobs.JOB_DIR), f"{jobs.EVIDENCE_DIR}/{relative}",
                            data)  # the archive makes the folders; the target must exist
        engine.start(container_id)
        engine.write_stdin(container_id, json.dumps(secrets).encode() + b"\n")  # one line
    except ControllerError:
        with contextlib.suppress(ControllerError):  # half made: no job, nothing to follow
            remove(engine, job)
        raise
    log.info("experiment.job_started", resource=plan.resource, run_id=run_id, runner=name,
             host=plan.host)
    return job


def runner_request(plan: RunPlan, name: str, image_id: str, labels: dict[str, str],
                   socket_path: str) -> ContainerRequest:
    """The runner container: the Host's Docker socket; what the run reads on its Host (the
    media its spec names, port-validation media and smoke clips, and the harness checkout),
    bound read-only at the same paths; its own volume at ``/job``. Without a DCGM exporter
    it reads GPU telemetry itself (NVML, else ``nvidia-smi``), so it is given the watched
    GPUs the Host reports, to read their counters only ("utility": no compute)."""
    gpus = [] if plan.spec.telemetry.dcgmUrl is not None else list(plan.host_gpus)
    marks = read_marks(plan.spec, JOB_READS)
    binds = read_only_binds([path for _, path in marks], str(jobs.JOB_DIR))
    # Judged on the Host as it is created: its own binds, and what the job will bind there
    # (the service's mounts); the job itself enforces no policy.
    reads = [*marks, *(("mounts", m.source) for m in plan.desired.deployment.spec.mounts)]
    return ContainerRequest(
        name=name, image=image_id, labels=labels, environment={},
        mounts=[(socket_path, DOCKER_SOCKET, False), *binds], reads=reads,
        volumes=[(name, str(jobs.JOB_DIR))], gpu_ids=gpus, gpu_capabilities=GPU_READ_ONLY,
        command=["-m", "controllers.kinds.experiments.runner.job"], network_mode="host",
        stdin_open=True, init=True, stop_timeout=plan.spec.cleanupSeconds + STOP_MARGIN_S)


def earlier_evidence(plan: RunPlan) -> list[tuple[str, bytes]]:
    """The evidence documents of the earlier runs the run reads (``read_runs``: an EVS pair's
    other side, a promotion's last accepted qualification), from ``evidenceRoot`` here, as
    ``<runId>/<path>``: their manifest and the JSON files of their ``evidence/`` folder (not
    their logs or reports). A run missing here is left out: the run itself says what it
    could not find."""
    found = []
    for run_id in plan.read_runs:
        folder = plan.evidence_root / run_id
        for path in [folder / MANIFEST, *sorted((folder / "evidence").glob("*.json"))]:
            with contextlib.suppress(OSError):
                if path.is_file() and path.stat().st_size <= EARLIER_MAX_BYTES:
                    found.append((f"{run_id}/{path.relative_to(folder)}", path.read_bytes()))
    return found


def find(engine: DockerEngine, instance: Owner, resource: Key, run_id: str) -> Job | None:
    """The run's runner on ``engine`` (any state), by its labels; None when there is none."""
    selector = {**ownership.selector(instance, resource), ownership.LABEL_RUN_ID: run_id,
                LABEL_ROLE: ROLE_RUNNER}
    for info in engine.list_containers(selector):
        if ownership.is_owned(info.labels, instance, resource):
            return Job(info.id, info.name)
    return None


def job_record(engine: DockerEngine, job: Job, key: Key) -> tuple[ResourceStatus | None, float]:
    """The job's own record of the run, and when the job last wrote it (unix seconds, 0 when
    there is none yet): copied out of the runner, running or exited. One file, not the job's
    state folder: the job saves often, and an archive of a folder whose files are being
    replaced fails, where one file replaced atomically is always whole."""
    with tempfile.TemporaryDirectory(prefix="rtvi-job-") as scratch:
        store = Store(Path(scratch) / jobs.STATE_DIR)
        mine = store.status_file(key)
        mine.parent.mkdir(parents=True)
        theirs = f"{jobs.JOB_DIR}/{jobs.STATE_DIR}/{mine.relative_to(store.root)}"
        if not engine.copy_out(job.container_id, theirs, mine.parent):
            return None, 0.0
        return store.load(key), store.written_at(key)


def mirror(store: Store, key: Key, theirs: ResourceStatus, job: Job, reported_at: float
           ) -> None:
    """The job's progress into this reconciler's record: phase, verdict, gates, conditions,
    the write-ahead inventory and history. Where the service is reached from here (``url``)
    and where the evidence lies here stay this record's own. A verdict is mirrored only once
    its evidence is home and verified (``_ended``): until then the job's terminal record is
    not copied, so a reader never sees a verdict whose bundle is not here."""
    them = ExperimentStatusFacts.of(theirs)

    def mutate(st: ResourceStatus) -> None:
        ours = ExperimentStatusFacts.of(st)
        # A reason noted here (the spec was removed) stands until the job gives its own.
        ours.phase, ours.result = them.phase, them.result
        ours.reason = them.reason or ours.reason
        ours.gates, ours.finished_at = dict(them.gates), them.finished_at
        ours.foreign = them.foreign or ours.foreign  # where a recovery must clean too
        ours.runner = job.name
        ours.reported_at = _iso(reported_at) if reported_at else None
        ours.followed_at = _iso(time.time())
        ours.put(st)
        st.conditions = [c.model_copy() for c in theirs.conditions]
        st.inventory = [i.model_copy() for i in theirs.inventory]
        seen = {(h.time, h.action) for h in st.history}
        for entry in theirs.history:
            if (entry.time, entry.action) not in seen:
                st.add_history(entry)
    store.update(key, mutate)


def _iso(unix_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def bring_home(engine: DockerEngine, job: Job, evidence_root: Path, run_id: str) -> list[str]:
    """Copy the job's evidence folder into ``evidence_root/run_id`` (replacing the placeholder
    the launch made there); returns what ``verify`` finds wrong with it there (nothing: [])."""
    with tempfile.TemporaryDirectory(prefix=".job-", dir=evidence_root) as scratch:
        if not engine.copy_out(job.container_id,
                               f"{jobs.JOB_DIR}/{jobs.EVIDENCE_DIR}/{run_id}", Path(scratch)):
            return [f"the runner {job.name} has no evidence folder for run {run_id}"]
        target = evidence_root / run_id
        if target.exists():
            shutil.rmtree(target)
        os.replace(Path(scratch) / run_id, target)
    return verify(target)


def remove(engine: DockerEngine, job: Job) -> None:
    engine.remove(job.container_id)
    engine.remove_volume(job.name)


@dataclass
class _Seen:
    """What a follow last saw: the job's last write, and when it last mirrored it here."""

    written: float = 0.0
    mirrored: float = 0.0
    unread: str = ""  # the last reason the job's record could not be read (logged once)


def _look(engine: DockerEngine, job: Job, store: Store, key: Key, run_id: str,
          seen: _Seen) -> None:
    """Read the job's record and mirror it here when it changed (or every
    ``FOLLOWED_EVERY_S``); a read that fails is not the job's end, and is said once."""
    try:
        theirs, written = job_record(engine, job, key)
    except TemporaryError as exc:
        if str(exc) != seen.unread:
            log.info("experiment.job_unread", resource=key, run_id=run_id, reason=str(exc))
        seen.unread = str(exc)
        return
    fresh = written != seen.written or time.monotonic() - seen.mirrored >= FOLLOWED_EVERY_S
    if theirs is not None and fresh and ExperimentStatusFacts.of(theirs).result is None:
        mirror(store, key, theirs, job, written)
        seen.written, seen.mirrored = written, time.monotonic()


def follow(connect: Callable[[], DockerEngine], job: Job, store: Store, key: Key,
           evidence_root: Path, run_id: str, stop: threading.Event,
           shutting_down: Callable[[], bool], grace_s: int, backstop_s: float) -> Verdict:
    """Watch the job to its end (see the module docstring); its verdict once brought home.
    ``connect`` gives the Host's engine (a new one after an SSH reconnect): while the Host
    cannot be reached the job runs on and the follow waits. ``backstop_s``: past it the job
    is stopped as an abort is (its own budget ends it first)."""
    seen = _Seen()

    def exited() -> ContainerInfo | None:
        try:
            engine = connect()
            info = engine.container(job.container_id)
        except TemporaryError as exc:  # unreachable for now (sshd down): not the job's end
            log.info("experiment.job_unreachable", resource=key, run_id=run_id, reason=str(exc))
            return None
        if info is None:
            raise RunnerEnded(f"the runner {job.name} was removed before it reported a verdict")
        _look(engine, job, store, key, run_id, seen)
        # Created and never started (a crash between the two) is an end too: nothing runs.
        return None if info.running or info.paused else info

    try:
        ended = until(exited, timeout_s=backstop_s, pace=FOLLOW_PACE_S, stop=stop)
    except Stopped:
        if shutting_down():  # the job runs on; the next start follows it again
            raise Stopped(f"the reconciler stops; run {run_id} runs on as {job.name}") from None
        ended = None
    engine = connect()
    if ended is None:  # aborted, or past the backstop: stop the runner, then as it ended
        log.warning("experiment.job_stopping", resource=key, run_id=run_id, runner=job.name)
        engine.stop(job.container_id, grace_s)
        ended = engine.container(job.container_id)
        if ended is None:
            raise RunnerEnded(f"the runner {job.name} was removed while it was stopped")
    return _ended(engine, job, store, key, evidence_root, run_id, ended)


def _ended(engine: DockerEngine, job: Job, store: Store, key: Key, evidence_root: Path,
           run_id: str, info: ContainerInfo) -> Verdict:
    theirs, written = job_record(engine, job, key)
    them = ExperimentStatusFacts.of(theirs)
    problems = bring_home(engine, job, evidence_root, run_id)
    said = engine.logs(job.container_id, tail=RUNNER_LOG_LINES)
    remove(engine, job)  # what a recovery needs is home: the record and the evidence
    verdict = info.exit_code == jobs.EXIT_VERDICT and them.result is not None and not problems
    if theirs is not None and (verdict or them.result is None):
        mirror(store, key, theirs, job, written)  # a verdict only with its evidence home
    if verdict and them.result is not None:
        return them.result
    _keep_container_log(evidence_root, run_id, said)  # unsealed: the recovery seals it
    error = last_error(said)
    why = (f"the runner {job.name} was created but never started" if info.status == "created"
           else f"its evidence failed verification: {'; '.join(problems[:3])}" if problems
           and info.exit_code == jobs.EXIT_VERDICT else
           f"the runner {job.name} exited {info.exit_code} without a verdict"
           + (f" ({info.error})" if info.error else "") + (f": {error}" if error else ""))
    raise RunnerEnded(why)


def _keep_container_log(evidence_root: Path, run_id: str, said: str) -> None:
    """The runner's container log as ``logs/runner.log`` of a bundle the recovery will seal
    (redacted where it was written; ``Evidence.write_text`` scrubs it again)."""
    if not said:
        return
    with contextlib.suppress(EvidenceError, OSError):
        Evidence.open(evidence_root, run_id).write_text(RUNNER_LOG, said)


def last_error(said: str) -> str:
    """The runner's last error line, short (``runner.crashed: KeyError: 'x'``; "" if none)."""
    for line in reversed(said.splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("level") == "error":
            detail = str(event.get("reason") or event.get("exception") or "").strip()
            last = detail.splitlines()[-1] if detail else ""
            return DEFAULT_REDACTOR.scrub_text(f"{event.get('event')}: {last}"[:ERROR_CHARS])
    return ""
