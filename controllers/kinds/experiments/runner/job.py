"""A run as a job on its Host: the frozen plan it executes, and the runner's ``main``.

Why a job: a run executes beside the reconciler today, so a restart, a SIGTERM or a lost SSH
connection ends it INCONCLUSIVE and an hours-long capacity search is lost (issue 27). The perf
field guide's executor is one durable job on the GPU host; this is ours. The reconciler freezes
the run's plan into ``plan.json`` (``freeze``), starts the runner image on the Host with the
job folder, the Host's Docker socket and the Host's network, and the job runs the very code
that runs in-process today (``controllers.kinds.experiments.run``) against the Host's own engine,
writing its record to a store of its own and its evidence beside it::

    /job/plan.json                 the frozen plan (no secret values)
    /job/runner.log                this process's log (kept in the bundle as logs/runner.log)
    /job/state/                    the run's record (a Store of one resource)
    /job/evidence/<runId>/         the bundle, sealed by the run as today

Secrets: ``plan.json`` names the run's secrets, never their values. The values arrive on the
job's stdin as one JSON object on one line when it starts and live only in the job's
memory: each secret is rewritten as ``fromEnv`` of a process-local variable, so
``controllers.secrets`` resolves and registers it with the redactor exactly as it does in the
reconciler (logs, records and evidence are scrubbed). The job is on the Host's network: it
reaches the service at the URL the Host sees (``url``), not through a tunnel.

Exit codes of ``main``: 0 the run reached a verdict (whatever it is; the record says which;
a run whose budget ran out is recovered here, INCONCLUSIVE after its cleanup, so nothing waits
for a reconciler to end it); 2 the plan or its secrets cannot be used (nothing was started);
3 stopped by SIGTERM or SIGINT before a verdict (the reconciler's recovery ends it
INCONCLUSIVE with its cleanup); 4 the run ID's evidence already exists here (a job never runs
a plan twice); 5 a bug (logged, redacted, as ``runner.crashed``; recovered as 3 is).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

import structlog
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from controllers.clients.docker_client import DockerEngine
from controllers.errors import ControllerError
from controllers.kinds.deployment.plan import Desired
from controllers.kinds.experiments import run as runs
from controllers.kinds.experiments.facts import ExperimentStatusFacts
from controllers.kinds.experiments.harnessproc import OnHost
from controllers.kinds.experiments.manifest import CodeRef
from controllers.kinds.host.gputelemetry import (
    DcgmTelemetry,
    NvmlTelemetry,
    SmiTelemetry,
    Telemetry,
    nvml_answers,
)
from controllers.kinds.streamset import publishing
from controllers.secrets import api_token, resolve_all
from controllers.waiting import Stopped
from specs.experiment import ExperimentSpec
from specs.models import Deployment
from specs.trust import TrustPolicy, enforce, enforced
from state import logchain
from state.errors import StateError
from state.evidence import Evidence, EvidenceError, Verdict
from state.keys import Key
from state.models import Owner, ResourceStatus
from state.redaction import DEFAULT_REDACTOR
from state.store import Store

JOB_DIR = Path("/job")
PLAN_FILE = "plan.json"
RUNNER_LOG = "runner.log"  # this process's log, beside the plan (kept in the bundle)
STATE_DIR = "state"
EVIDENCE_DIR = "evidence"
DOCKER_URL = "unix:///var/run/docker.sock"
SECRET_ENV_PREFIX = "RTVI_RUN_SECRET_"
EXIT_VERDICT, EXIT_UNUSABLE, EXIT_STOPPED, EXIT_RAN_BEFORE, EXIT_CRASHED = 0, 2, 3, 4, 5
MAX_SECRETS_BYTES = 1 << 20
_SPEC = TypeAdapter(ExperimentSpec)
log = structlog.get_logger("controllers.kinds.experiments.runner")


class FrozenService(BaseModel):
    """A service the run starts besides its own (its type's ``companions``), resolved on its
    Host when it was launched: its secrets by name only, as the run's own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    service: dict[str, Any]
    spec_hash: str
    container_name: str
    image_id: str
    env: dict[str, str]
    labels: dict[str, str]
    url: str
    secrets: list[str] = []

    @classmethod
    def of(cls, desired: Desired) -> FrozenService:
        return cls(service=desired.deployment.model_dump(mode="json", by_alias=True),
                   spec_hash=desired.spec_hash, container_name=desired.container_name,
                   image_id=desired.image_id, env=dict(desired.env),
                   labels=dict(desired.labels), url=desired.url,
                   secrets=[ref.name for ref in desired.deployment.spec.secrets])


class JobPlan(FrozenService):
    """``RunPlan`` as JSON: what was frozen at launch, with the secrets' names only; the run's
    own service (its Deployment, resolved on its Host) is the ``FrozenService`` it extends."""

    instance: str
    owner_id: str | None
    resource: str
    name: str
    spec: dict[str, Any]
    run_hash: str
    template: dict[str, Any]
    host: str
    gpu_ids: list[str]
    other_gpus: list[str]
    source_file: str
    revision: str | None
    dcgm_url: str | None = None
    publisher_image: str | None = None  # put on the Host by the reconciler (no GStreamer here)
    code_version: str = "unknown"  # the reconciler's code: the runner has no checkout
    code_revision: str = "unknown"
    runner_image: str | None = None  # the harness container's skeleton (``harnessproc``)
    volume: str | None = None  # the job's volume, at ``JOB_DIR`` here and in the harness
    trust: TrustPolicy | None = None  # the reconciler's, judged again here at each use
    companions: dict[str, FrozenService] = {}  # by name; their secrets: ``secret_keys``
    earlier: dict[str, str] = {}  # role → the earlier run it reads (given in evidence/)


def freeze(plan: runs.RunPlan, instance: Owner, publisher_image: str | None = None,
           runner_image: str | None = None, volume: str | None = None) -> JobPlan:
    """The job's plan; ``instance`` keeps its owner ID (what the run creates is labelled with
    it); ``publisher_image``, ``runner_image``: their IDs on the Host; ``volume``: the job's.
    A plan whose secrets cannot be used is refused before, by ``plan``/``launch``."""
    code = runs.code_ref()
    return JobPlan(
        **dict(FrozenService.of(plan.desired)),
        instance=str(instance), owner_id=instance.owner_id,
        resource=str(plan.resource), name=plan.name,
        spec=plan.spec.model_dump(mode="json"), run_hash=plan.run_hash,
        template=plan.template.model_dump(mode="json", by_alias=True),
        host=plan.host, gpu_ids=list(plan.gpu_ids),
        other_gpus=list(plan.other_gpus), source_file=plan.source_file,
        revision=plan.revision, dcgm_url=plan.spec.telemetry.dcgmUrl,
        publisher_image=publisher_image, code_version=code.version,
        code_revision=code.revision, runner_image=runner_image, volume=volume,
        trust=enforced(), companions={name: FrozenService.of(companion)
                                      for name, companion in plan.companions},
        earlier=dict(plan.earlier))


def secret_values(plan: runs.RunPlan) -> dict[str, str]:
    """The values the job is given on its stdin, read now (``secret_keys`` names them): its
    own service's secrets, then each companion's as ``<companion>/<secret>``."""
    values = resolve_all(plan.desired.deployment.spec.secrets)
    for name, companion in plan.companions:
        values.update({f"{name}/{key}": value for key, value in resolve_all(
            companion.deployment.spec.secrets).items()})
    return values


def secret_keys(job: JobPlan) -> list[tuple[str, str]]:
    """Each secret the job must be given: its key on stdin, and the variable of this process
    it is read from (a companion's apart from the run's own, whatever their names)."""
    keys = [(name, SECRET_ENV_PREFIX + name) for name in job.secrets]
    for companion, frozen in job.companions.items():
        keys += [(f"{companion}/{name}", f"{SECRET_ENV_PREFIX}{companion}__{name}")
                 for name in frozen.secrets]
    return keys


def _as_env_refs(deployment: dict[str, Any], prefix: str = SECRET_ENV_PREFIX
                 ) -> dict[str, Any]:
    """The Deployment with each secret read from a variable of this process (see the module
    docstring): the job has the values, not the files or variables they came from."""
    spec = dict(deployment.get("spec") or {})
    spec["secrets"] = [{"name": ref["name"], "fromEnv": prefix + ref["name"]}
                       for ref in spec.get("secrets") or []]
    return {**deployment, "spec": spec}


def _thawed(frozen: FrozenService, resource: Key, source_file: str, prefix: str) -> Desired:
    return Desired(
        deployment=Deployment.model_validate(_as_env_refs(frozen.service, prefix)),
        resource=resource, spec_hash=frozen.spec_hash, container_name=frozen.container_name,
        image_id=frozen.image_id, env=dict(frozen.env), labels=dict(frozen.labels),
        url=frozen.url, probe_url=frozen.url, source_file=source_file)


def thaw(job: JobPlan, evidence_root: Path, runner_log: Path | None = None) -> runs.RunPlan:
    """The ``RunPlan`` the run code executes (``runner_log``: this job's own log, kept in the
    bundle); pydantic's ValidationError when it is not one."""
    kind, _, name = job.resource.partition("/")
    resource = Key(kind, name)
    return runs.RunPlan(
        resource=resource, name=job.name, spec=_SPEC.validate_python(job.spec),
        run_hash=job.run_hash, template=Deployment.model_validate(_as_env_refs(job.template)),
        desired=_thawed(job, resource, job.source_file, SECRET_ENV_PREFIX), host=job.host,
        gpu_ids=list(job.gpu_ids), evidence_root=evidence_root,
        source_file=job.source_file, revision=job.revision, other_gpus=tuple(job.other_gpus),
        code=CodeRef(version=job.code_version, revision=job.code_revision),
        harness_on_host=OnHost(job.runner_image, job.volume, str(JOB_DIR))
        if job.runner_image and job.volume else None, runner_log=runner_log,
        companions=tuple((companion, _thawed(frozen, resource, job.source_file,
                                             f"{SECRET_ENV_PREFIX}{companion}__"))
                         for companion, frozen in job.companions.items()),
        earlier=tuple(job.earlier.items()))


def take_secrets(job: JobPlan, stream: Any) -> None:
    """Read the secrets' values (one JSON object on ``stream``) into this process's
    environment under the names ``secret_keys`` gave them; ValueError names what is wrong,
    never a value."""
    keys = secret_keys(job)
    if not keys:
        return
    raw = stream.readline(MAX_SECRETS_BYTES + 1)  # one line: stdin stays open after it
    if len(raw) > MAX_SECRETS_BYTES:
        raise ValueError(f"the secrets on stdin exceed {MAX_SECRETS_BYTES} bytes")
    try:
        values = json.loads(raw or "{}")
    except json.JSONDecodeError:
        raise ValueError("the secrets on stdin are not one JSON object") from None
    if not isinstance(values, dict):
        raise ValueError("the secrets on stdin are not one JSON object")
    missing = [key for key, _ in keys if not isinstance(values.get(key), str)]
    if missing:
        raise ValueError(f"no value on stdin for secret(s) {', '.join(missing)}")
    for key, variable in keys:
        os.environ[variable] = values[key]


def telemetry_on_host(job: JobPlan) -> Telemetry:
    """GPU telemetry read where the GPUs are: the DCGM exporter when the spec names one, else
    NVML in this process, else ``nvidia-smi`` here; never a command over SSH per sample."""
    if job.dcgm_url is not None:
        return DcgmTelemetry(job.dcgm_url)
    if nvml_answers() is None:
        return NvmlTelemetry()
    return SmiTelemetry(where=f"Host {job.host}")


def _budget(plan: runs.RunPlan, store: Store, stop: threading.Event,
            spent: threading.Event) -> threading.Timer:
    """The run's budget, enforced here where it runs: when it is spent (its cleanup's share
    kept), the reason goes into the record, ``spent`` is set and the run stops; ``run_job``
    then recovers it here (INCONCLUSIVE after its cleanup), so that nothing waits for a
    reconciler to come back to end it."""
    spec = plan.spec

    def out() -> None:
        def note(st: ResourceStatus) -> None:
            known = ExperimentStatusFacts.of(st)
            known.reason = (f"its budget of {spec.budgetSeconds}s ran out "
                            f"({spec.cleanupSeconds}s of it kept for cleanup)")
            known.put(st)
        with contextlib.suppress(StateError):
            store.update(plan.resource, note)
        spent.set()
        stop.set()
    timer = threading.Timer(float(spec.budgetSeconds - spec.cleanupSeconds), out)
    timer.daemon = True
    return timer


def _recover_here(plan: runs.RunPlan, store: Store, engine: DockerEngine, instance: Owner,
                  telemetry: Telemetry) -> Verdict | None:
    """The run stopped by its own budget, recovered on its Host as the reconciler would
    (INCONCLUSIVE, its cleanup proven, the bundle sealed): None when it cannot be (the
    reconciler's recovery then does it)."""
    record = store.load(plan.resource)
    if record is None:
        return None
    try:
        token = api_token(plan.template.spec)
    except ControllerError:
        token = None
    with contextlib.suppress(EvidenceError):
        runs.keep_runner_log(Evidence.open(plan.evidence_root, plan.spec.runId),
                             plan.runner_log)  # the recovery seals the bundle
    try:
        return runs.recover(store, record, engine, instance, plan.evidence_root,
                            threading.Event(), token, telemetry)
    except (ControllerError, StateError) as exc:
        log.error("runner.recovery_failed", run_id=plan.spec.runId, reason=str(exc))
        return None


def open_job(job_dir: Path, stdin: Any) -> tuple[JobPlan, runs.RunPlan]:
    """The job's plan, its secrets taken from ``stdin``, thawed; and the operator's trust
    policy that came with it put in force in this process, so what the harness config names is
    judged here, on the Host, where it is read (OSError, ValidationError, ValueError: the job
    is unusable)."""
    job = JobPlan.model_validate_json((job_dir / PLAN_FILE).read_bytes())
    take_secrets(job, stdin)
    plan = thaw(job, job_dir / EVIDENCE_DIR, job_dir / RUNNER_LOG)
    enforce(job.trust)
    return job, plan


def run_job(job_dir: Path, stdin: Any, stop: threading.Event, docker_url: str = DOCKER_URL
            ) -> int:
    """Execute the job in ``job_dir`` (see the module docstring for the exit codes)."""
    try:
        job, plan = open_job(job_dir, stdin)
    except (OSError, ValidationError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.error("runner.unusable", reason=DEFAULT_REDACTOR.scrub(message))
        return EXIT_UNUSABLE
    if (plan.evidence_root / plan.spec.runId).exists():
        log.error("runner.ran_before", run_id=plan.spec.runId,
                  reason="this run's evidence exists: a job never runs its plan twice")
        return EXIT_RAN_BEFORE
    store = Store(job_dir / STATE_DIR)
    instance = Owner(job.instance, job.owner_id or "")  # "": frozen before owner IDs
    engine = DockerEngine(docker_url, job.host)
    spent = threading.Event()
    budget = _budget(plan, store, stop, spent)
    telemetry = telemetry_on_host(job)
    if job.publisher_image is not None:
        publishing.use_publisher_image(engine, job.publisher_image)
    try:
        runs.launch_record(store, plan)
        budget.start()
        verdict = runs.execute(plan, engine, store, instance, stop,
                               lambda message: log.info("runner.progress", message=message),
                               telemetry)
    except Stopped as exc:  # SIGTERM: the reconciler recovers it; the budget: here
        log.warning("runner.stopped", run_id=plan.spec.runId, reason=str(exc))
        recovered = _recover_here(plan, store, engine, instance, telemetry) if (
            spent.is_set()) else None
        if recovered is None:
            return EXIT_STOPPED
        verdict = recovered
    except ControllerError as exc:
        log.error("runner.failed", run_id=plan.spec.runId, reason=str(exc))
        return EXIT_STOPPED  # no verdict: the reconciler's recovery ends it INCONCLUSIVE
    finally:
        budget.cancel()
        engine.close()
    log.info("runner.verdict", run_id=plan.spec.runId, result=verdict)
    return EXIT_VERDICT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m controllers.kinds.experiments.runner.job",
        description="Run one Experiment's frozen plan on this Host (the reconciler starts "
                    "this in the runner image; see the module docstring).")
    parser.add_argument("--job-dir", type=Path, default=JOB_DIR,
                        help="the job folder: plan.json, state/, evidence/ (default /job)")
    parser.add_argument("--docker", default=DOCKER_URL,
                        help="the Host's Docker engine, as seen here (default: its socket)")
    args = parser.parse_args(argv)
    streams: list[TextIO] = [sys.stdout]  # its container's log: JSON lines, scrubbed
    with contextlib.suppress(OSError):  # and the file its bundle keeps (``thaw``)
        streams.append(open(args.job_dir / RUNNER_LOG, "a", encoding="utf-8"))  # noqa: SIM115
    logchain.configure(logchain.Tee(streams))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        return run_job(args.job_dir, sys.stdin, stop, args.docker)
    except Exception:  # a bug: logged through the redactor (a raw traceback is not)
        log.exception("runner.crashed")
        return EXIT_CRASHED


if __name__ == "__main__":
    sys.exit(main())
