"""The run's own service: its template's container, fresh, under the run's name and labels.

``runtimePolicy: fresh_per_run``: a run never measures a service someone else started or an
earlier run warmed up. Its container is the template Deployment's (image, model, environment,
mounts, GPUs) under ``ownership.project_name(runId)``, labelled with the run ID and owned by the
Experiment; only the port (and, for a service that reads it from its environment, the
variables that say so) differs. Before launch the container guard looks for that name: anything
there — foreign, or left by an earlier attempt — is a Conflict and is never reused or touched.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from controllers import ownership
from controllers.clients.docker_client import ContainerInfo, DockerEngine
from controllers.clients.rtvi_client import RtviClient
from controllers.errors import ControllerError
from controllers.kinds.deployment.controller import container_request
from controllers.kinds.deployment.plan import Desired
from controllers.kinds.deployment.readiness import wait_ready
from controllers.secrets import api_token, resolve_all
from specs.facts import HostFacts
from specs.models import Deployment
from specs.rules import R10, Finding
from specs.validate import SpecSet
from state.keys import Key
from state.models import Owner

STOP_GRACE_CAP_S = 30  # a run's cleanup has one deadline: never wait longer than this per stop
STOP_WORKERS = 8  # containers stopped at once (each stop mostly waits on the engine)
KILLED_EXIT = 137  # 128 + SIGKILL: the engine killed it once its stop timeout ran out
KILLED_LOG_LINES = 40  # of a killed container's log, kept in the cleanup's evidence


def gpu_conflicts(run: Deployment, spec_set: SpecSet, facts: HostFacts) -> list[Finding]:
    """Rule 10 for the run: its GPUs must not be claimed by any Deployment on its Host (its
    template included: a run never shares a GPU with the service it copies)."""
    wanted = {g.uuid: i for i, ref in enumerate(run.spec.gpus) if (g := facts.gpu(ref))}
    found = []
    for dep in spec_set.deployments:
        if dep.spec.host != run.spec.host:
            continue
        for ref in dep.spec.gpus:
            gpu = facts.gpu(ref)
            if gpu is not None and gpu.uuid in wanted:
                found.append(Finding(("spec", "template"), f"GPU {gpu.index} ({gpu.uuid}) is "
                                     f"claimed by Deployment {dep.metadata.name}: the run's "
                                     "fresh service needs its GPUs to itself (name free ones "
                                     "in spec.service.gpus)", R10))
    return found


def for_run(desired: Desired, instance: Owner, resource: Key, run_id: str,
            run_hash: str, companion: str = "") -> Desired:
    """The template's resolved container, renamed and relabelled for the run (``companion``:
    another version the run starts, named apart, labelled as the run's)."""
    name = f"{run_id}-{companion}" if companion else run_id
    return dataclasses.replace(
        desired, resource=resource, container_name=ownership.project_name(name),
        labels=ownership.labels_for(instance, resource, run_hash, run_id=run_id))


def guard(engine: DockerEngine, name: str, instance: Owner, resource: Key,
          run_id: str) -> str | None:
    """The container guard: None when the run's name is free, else why the run cannot start."""
    info = engine.container(name)
    if info is None:
        return None
    if (ownership.is_owned(info.labels, instance, resource)
            and info.labels.get(ownership.LABEL_RUN_ID) == run_id):
        return (f"container {name} of run {run_id} already exists: a run never reuses a "
                "container (remove it, or give the Experiment a new runId)")
    return (f"a container named {name} exists and is not this run's "
            f"({ownership.why_not_ours(info.labels, instance)}); it is left untouched")


@dataclass(frozen=True)
class RunService:
    container_id: str
    container_name: str
    url: str  # as seen on the Host
    probe_url: str  # as this process reaches it
    model_id: str
    token: str | None
    # What the service said of itself while it started (``runtime_facts``): its precision,
    # max_model_len, KV-cache dtype, mode, memory utilisation, scheduler limits, caches, workers.
    runtime: dict[str, str] = field(default_factory=dict)

    def client(self) -> RtviClient:
        """A client of this service, as this process reaches it (close it after use)."""
        return RtviClient(self.probe_url, token=self.token)


def launch(engine: DockerEngine, desired: Desired, gpu_ids: list[str], timeout_s: float,
           stop: threading.Event, progress: Callable[[str], None]) -> RunService:
    """Create and start the run's container and wait until it serves (ReadinessFailed)."""
    spec = desired.deployment.spec
    secret_env = resolve_all(spec.secrets)  # registers the values with the redactor
    request = container_request(desired, desired.container_name, secret_env, gpu_ids)
    container_id = engine.create(request)
    del request, secret_env
    engine.start(container_id)
    token = api_token(spec)
    result = wait_ready(engine, container_id, desired.probe_url, timeout_s,
                        spec.readiness.pollSeconds, progress, stop, token)
    return RunService(container_id, desired.container_name, desired.url, desired.probe_url,
                      result.model_id, token, dict(result.runtime))


def owned_containers(engine: DockerEngine, instance: Owner, resource: Key) -> list[ContainerInfo]:
    """Every container the Experiment owns on this engine (its service and its publishers).
    Its runner (``executor: host``) is not the run's to clean up: the run executes in it, and
    the reconciler removes it once it has brought the run's record and evidence home."""
    return [c for c in engine.list_containers(ownership.selector(instance, resource))
            if ownership.is_owned(c.labels, instance, resource)
            and c.labels.get(ownership.LABEL_ROLE) != ownership.ROLE_RUNNER]


def remove_containers(engine: DockerEngine, instance: Owner, resource: Key, recorded: set[str],
                      grace_s: int, stops: dict[str, str] | None = None,
                      deadline: float | None = None) -> list[str]:
    """Stop and remove the containers the Experiment's inventory lists AND that carry its
    labels; returns what is left, with why (a labelled container the inventory does not list
    is not removed on labels alone: DESIGN.md, Ownership).

    The containers stop together, each given ``grace_s`` (capped, and never past
    ``deadline``, a ``time.monotonic()`` instant) after SIGTERM before the engine kills it: N
    publishers cost one grace period, not N. ``stops`` receives, per container, how it ended,
    so a cleanup that ran long names the container that ignored SIGTERM (the field guide's
    guard force-removes; the evidence says who needed it)."""
    left = []
    try:
        owned = owned_containers(engine, instance, resource)
    except ControllerError as exc:
        return [f"cannot list the run's containers: {exc}"]
    ours = []
    for info in owned:
        if info.name in recorded:
            ours.append(info)
        else:
            left.append(f"container {info.name} carries the run's labels but is not in its "
                        "inventory: left alone")

    def timeout() -> int:  # asked as each stop starts: a queued one gets what is left
        most = min(grace_s, STOP_GRACE_CAP_S)
        if deadline is not None:
            most = min(most, int(deadline - time.monotonic()))
        return max(1, most)

    if ours:
        with ThreadPoolExecutor(max_workers=min(len(ours), STOP_WORKERS)) as pool:
            # each call in the caller's context: a replica's fence sees the share it acts for
            jobs = [pool.submit(contextvars.copy_context().run, _stop_and_remove, engine, info,
                                timeout) for info in ours]
            ended = [job.result() for job in jobs]
        for info, (how, problem) in zip(ours, ended, strict=True):
            if stops is not None:
                stops[info.name] = how
            if problem:
                left.append(f"container {info.name}: {problem}")
    return left


def _stop_and_remove(engine: DockerEngine, info: ContainerInfo,
                     timeout: Callable[[], int]) -> tuple[str, str]:
    """``(how it ended, problem or "")`` for one container; what it printed last is kept when
    it had to be killed, but never stands in the way of removing it."""
    began, allowed = time.monotonic(), timeout()
    try:
        engine.stop(info.id, allowed)
    except ControllerError as exc:
        return f"not stopped: {exc}", str(exc)
    took = time.monotonic() - began
    last = ""
    try:
        after = engine.container(info.id)
        if after is not None and after.exit_code == KILLED_EXIT and took >= allowed:
            last = engine.logs(info.id, tail=KILLED_LOG_LINES) or "(no log)"
    except ControllerError as exc:
        last = f"(its log could not be read: {exc})" if took >= allowed else ""
    try:
        engine.remove(info.id)
    except ControllerError as exc:
        return f"not removed: {exc}", str(exc)
    if last:  # what it printed last says where it hung (the emulator dumps its stacks)
        return (f"killed after {took:.1f}s: did not stop within {allowed}s of SIGTERM; its "
                f"last lines:\n{last}"), ""
    return f"stopped in {took:.1f}s", ""
