"""Experiment: a run that happens exactly once and leaves verifiable evidence.

A pass observes and advances; the run itself executes beside the queue (``controllers.
experiments.board``), or in the caller's thread for one-shot ``apply``, which waits for the
verdict. What a pass decides, from the spec and the stored record:

- **No record for this runId**: launch — unless its evidence folder exists (a run ID is used
  once), the container guard finds the run's name taken (Conflict, untouched), or the run's
  service breaks a rule. ``plan`` lists the side effects: the container, the sources and
  streams, the GPUs and the time budget (in GitOps a commit is the execute button).
- **The record's run, under way here**: report its phase, look again shortly.
- **The record's run, under way but unknown to this process** (a crash, kill -9): INCONCLUSIVE
  after its cleanup.
- **The record's run, terminal**: nothing, ever again.
- **The same runId with a changed spec**: refused at plan (a running run keeps its frozen spec).
Removing the spec prunes what a run left running (its service, publishers and streams), never
its evidence.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from pydantic import ValidationError

from controllers.actions import Action
from controllers.clients.docker_client import DockerEngine
from controllers.contract import (
    PassContext,
    Report,
    ResourcePlan,
    Result,
    Runtime,
    declared_references,
    done,
    guarded,
    recheck,
    retry,
    stopped,
    terminal,
    unplanned,
)
from controllers.errors import ControllerError, PermanentError, PlanError, StillProgressing
from controllers.kinds.deployment.controller import resolve_desired
from controllers.kinds.experiments.board import RunBoard, Work
from controllers.kinds.experiments.facts import ExperimentStatusFacts, FrozenRun
from controllers.kinds.experiments.service import (
    for_run,
    gpu_conflicts,
    guard,
    remove_containers,
)
from controllers.kinds.host.fleet import Hosts
from controllers.kinds.host.pulls import Pulls, bring, verify
from controllers.kinds.host.session import HostSession
from controllers.secrets import api_token, resolve
from controllers.services import Services
from controllers.waiting import Stopped
from specs.declarations import EXPERIMENT
from specs.experiment import Experiment, measure_warnings, run_deployment
from specs.models import DeploymentSpec, TelemetrySpec
from specs.rules import Finding, check_deployment
from specs.validate import spec_hash
from state.errors import StateError
from state.keys import Key
from state.models import ResourceStatus, utc_now
from state.store import Store

if TYPE_CHECKING:  # a run's machinery (every type, reports, plots): imported by a pass that
    # has an Experiment to plan or run, not by every command that loads the kinds
    from controllers.kinds.deployment.plan import Desired
    from controllers.kinds.experiments import run as runs
    from controllers.kinds.experiments.runner import hostjob
    from specs.experiment import ExperimentSpec
    from specs.models import Deployment

log = structlog.get_logger("reconciler.kinds")
RUN_POLL_S = 5.0  # how often a pass looks at a run under way (its end wakes one at once)
EVIDENCE_DIR = "evidence"
CLEANING = ("Collecting", "CleaningUp", "Done")


@dataclass
class RunPlanView:
    """What a pass would do for an Experiment (``plan`` prints it)."""

    resource: str
    actions: list[Action] = field(default_factory=list)
    conflict: str | None = None

    @property
    def changes(self) -> bool:
        return bool(self.actions)


@dataclass
class ExperimentDesired:
    experiment: Experiment
    record: ResourceStatus | None
    launch: runs.RunPlan | None = None  # set when a new run is to start
    refused: str | None = None  # same runId, changed spec
    idle: str | None = None  # why its run does not start now (its type waits: a promotion)


def evidence_root(ctx: PassContext, exp: Experiment) -> Path:
    root = exp.spec.evidenceRoot
    return Path(root) if root else ctx.services.store.root / EVIDENCE_DIR


def _keep_bundle(store: Store, run_id: str, folder: Path) -> None:
    """A terminal run's evidence, kept where every reader of the store finds it (with the
    records in etcd: there, for ``evidence`` on any machine). Never fails the pass: the
    bundle stays in its folder, and the next pass tries again."""
    try:
        if store.keep_bundle(run_id, folder):
            log.info("experiment.bundle_kept", run_id=run_id, folder=str(folder))
    except (StateError, OSError) as exc:
        log.warning("experiment.bundle_not_kept", run_id=run_id, reason=str(exc))


def _recorded_root(known: ExperimentStatusFacts, state_root: Path) -> Path:
    """The evidence root a run's record names (its bundle's folder's parent); a record that
    names none had the default, as ``evidence_root`` gives it."""
    return Path(known.evidence).parent if known.evidence else state_root / EVIDENCE_DIR


ExperimentPlan = ResourcePlan[ExperimentDesired, RunPlanView]


class ExperimentKind:
    name = "Experiment"
    spec = EXPERIMENT
    owns = True
    max_parallel: int | None = None

    def references(self, resource: Experiment) -> list[Key]:
        return declared_references(self.spec, resource)

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        template = ExperimentStatusFacts.of(record).template
        return [Key("Deployment", template)] if template else []

    # --- plan ------------------------------------------------------------------------------

    def plan(self, ctx: PassContext, resource: Experiment) -> ExperimentPlan:
        from controllers.kinds.experiments.types import run_type

        assert ctx.spec_set is not None  # a pass that plans has its spec set
        key = Key("Experiment", resource.metadata.name)
        kind = run_type(resource.spec)
        run_id = kind.run_id(resource.spec, ctx.services.store)
        if run_id != resource.spec.runId:  # an attempt again at the same (a promotion's)
            resource = resource.model_copy(update={"spec": resource.spec.model_copy(
                update={"runId": run_id})})
        rp = ExperimentPlan(key, resource.metadata.name)
        Hosts.of(ctx.services).pass_started(key)  # a name freed from now on is not missed
        record = ctx.services.store.load(key)
        known = ExperimentStatusFacts.of(record)
        desired = ExperimentDesired(resource, record)
        rp.desired = desired
        view = RunPlanView(key)
        run_id = resource.spec.runId
        if record is not None and known.run_id == run_id:
            if record.observed_generation != spec_hash(resource):
                desired.refused = (f"run {run_id} was started from another version of this "
                                   "spec; a run never changes once launched and a run ID is "
                                   "used once: give the changed spec a new runId")
                rp.refuse(desired.refused, "RunIdReused")
            elif _never_started(ctx, record, known):
                with rp.observing():  # launched, but its job was never created: start it
                    desired.launch = self._launch_plan(ctx, resource, view, launched=True)
            rp.plan = view
            return rp
        if record is not None and known.run_id and known.result is None:
            rp.plan = view  # the previous run is finished (or recovered) first
            return rp
        desired.idle = kind.waits_for(resource.spec, ctx.services.store)
        if desired.idle is None:
            with rp.observing():
                desired.launch = self._launch_plan(ctx, resource, view)
        rp.plan = view
        return rp

    def _launch_plan(self, ctx: PassContext, exp: Experiment,
                     view: RunPlanView, launched: bool = False) -> runs.RunPlan:
        """The run to start; ``launched``: its launch was recorded (its run ID claimed) but
        nothing of it started, so its evidence folder is its own already."""
        from controllers.kinds.experiments import run as runs
        from controllers.kinds.experiments.types import run_type

        spec_set, services = ctx.spec_set, ctx.services
        assert spec_set is not None
        spec = exp.spec
        root = evidence_root(ctx, exp)
        if not launched and (root / spec.runId).exists():
            raise PermanentError(f"run ID {spec.runId} was used before: {root / spec.runId} "
                                 "exists (a run ID is used once; give the Experiment a new "
                                 "runId)")
        template = spec_set.deployment(spec.template)
        assert template is not None  # crossref guarantees it
        hosts = Hosts.of(services)
        if template.spec.host in hosts.errors:
            raise ControllerError(hosts.errors[template.spec.host])
        host = spec_set.host(template.spec.host)
        kind = run_type(spec)
        if (kind.local_only(spec) and host is not None
                and not host.spec.docker.startswith("unix://")):
            raise PermanentError(f"a {spec.type} run starts a process beside the reconciler: "
                                 f"its template's Host {template.spec.host} must be this "
                                 "machine's engine (remote Hosts are not supported for it yet)")
        session = hosts.session(host)
        run_dep = run_deployment(template, spec)
        facts = session.facts or session.observe()
        findings = [Finding(("spec", "service"), f"the run's copy of Deployment "
                            f"{template.metadata.name} breaks a rule: {f.message}", f.rule)
                    for f in check_deployment(run_dep)]
        findings += gpu_conflicts(run_dep, spec_set, facts)
        if findings:
            raise PlanError([spec_set.issue(exp, f) for f in findings])
        key = Key("Experiment", exp.metadata.name)
        digest = spec_hash(exp)
        resolved = for_run(resolve_desired(run_dep, spec_set, session, services.instance,
                                           pulls=Pulls.of(services)),
                           services.instance, key, spec.runId, digest)
        view.conflict = guard(session.engine(), resolved.container_name, services.instance,
                              key, spec.runId)
        companions = self._companions(ctx, template, spec, session, key, digest, view)
        gpus = [str(g) for g in run_dep.spec.gpus]
        gpu_ids = [g.uuid if (g := facts.gpu(ref)) else str(ref) for ref in run_dep.spec.gpus]
        host_gpus = facts.reported([*gpu_ids, *spec.telemetry.gpus])
        if spec.executor == "host" and spec.telemetry.dcgmUrl is None:
            telemetry = "NVML (else nvidia-smi) in the job, reading " + (
                ", ".join(host_gpus) if host_gpus else "no GPU the Host reports")
        else:
            telemetry = session.telemetry(spec.telemetry.dcgmUrl).name
        telemetry += " (required)" if spec.telemetry.required else ""
        if resolved.pull is not None:
            need = resolved.pull
            view.actions.append(Action(need.verb, need.target, f"{need.cause}; from "
                                       f"{need.registry}"))
        view.actions += [
            Action("create", f"container {resolved.container_name}", f"run {spec.runId}'s "
                      f"fresh service from Deployment {spec.template} ({template.spec.image}) "
                      f"on Host {template.spec.host}, {resolved.url}"),
            *(Action(step.verb, step.target, step.cause) for step in kind.planned(spec)),
            *(Action("warn", "measure", why)
              for why in measure_warnings(spec, {k: str(v) for k, v in run_dep.spec.env.items()})),
            Action("run", f"{spec.type} {spec.runId}", f"gates: "
                      f"{', '.join([*kind.declared_gates(spec), runs.GATE_CLEANUP])}; GPUs: "
                      f"{', '.join(gpus) or 'none'}; GPU telemetry: {telemetry}; budget "
                      f"{spec.budgetSeconds}s, cleanup {spec.cleanupSeconds}s; evidence in "
                      f"{root / spec.runId}" + (
                          f"; executes as a job on Host {template.spec.host}, outliving the "
                          "reconciler" if spec.executor == "host" else ""))]
        return runs.RunPlan(
            resource=key, name=exp.metadata.name, spec=spec, run_hash=digest, template=template,
            desired=resolved, host=template.spec.host, gpu_ids=gpu_ids,
            other_gpus=tuple(spec.telemetry.gpus), host_gpus=host_gpus,
            evidence_root=root, source_file=spec_set.source_file(exp),
            revision=ctx.revision, companions=companions,
            earlier=tuple(kind.earlier(spec, ctx.services.store).items()))

    def _companions(self, ctx: PassContext, template: Deployment, spec: ExperimentSpec,
                    session: HostSession, key: Key, digest: str, view: RunPlanView
                    ) -> tuple[tuple[str, Desired], ...]:
        """The other versions the run starts in its room (its type's ``companions``),
        resolved on its Host now and frozen with the run; each is planned as a container of
        the run's own. Their images must be on the Host already (a running version's is)."""
        from controllers.kinds.experiments.types import run_type

        assert ctx.spec_set is not None
        found = []
        for name, companion_spec in run_type(spec).companions(spec, ctx.services.store).items():
            dep = run_deployment(template.model_copy(update={"spec": companion_spec}), spec)
            resolved = for_run(resolve_desired(dep, ctx.spec_set, session,
                                               ctx.services.instance,
                                               pulls=Pulls.of(ctx.services)),
                               ctx.services.instance, key, spec.runId, digest, name)
            if resolved.pull is not None:
                raise ControllerError(f"the run's {name} service ({companion_spec.image}) "
                                      f"cannot start: {resolved.pull.cause}")
            view.conflict = view.conflict or guard(
                session.engine(), resolved.container_name, ctx.services.instance, key,
                spec.runId)
            view.actions.append(Action("create", f"container {resolved.container_name}", (
                f"run {spec.runId}'s fresh {name} service ({companion_spec.image}) in the "
                f"same room, {resolved.url}, measured as its own service is")))
            found.append((name, resolved))
        return tuple(found)

    # --- act -------------------------------------------------------------------------------

    def act(self, ctx: PassContext, rp: ExperimentPlan) -> Result:
        desired = rp.desired
        if desired is None:
            return unplanned(rp)
        result = guarded(rp.resource, lambda: self._advance(ctx, rp, desired))
        if result.report is not None and _run_under_way(ctx.services.store, rp.resource):
            # A run under way writes its own record (phases, verdict): a failure of this pass
            # (its Host unreachable while it is followed) must not overwrite what it says.
            return dataclasses.replace(result, report=None)
        return result  # a failure before the launch is recorded like any kind's

    def _advance(self, ctx: PassContext, rp: ExperimentPlan, desired: ExperimentDesired
                 ) -> Result:
        from controllers.kinds.experiments import run as runs

        services = ctx.services
        key = rp.resource
        record = services.store.load(key)
        known = ExperimentStatusFacts.of(record)
        if record is not None and known.run_id and known.result is None:
            launch = desired.launch
            if (launch is not None and launch.spec.runId == known.run_id
                    and self._job_absent(ctx, record, known)):
                return self._start_launched(ctx, desired, launch)
            return self._under_way(ctx, record)  # a new runId starts once this one is done
        if desired.refused is not None or desired.launch is None:
            if record is not None and known.run_id == desired.experiment.spec.runId:
                return self._verdict(key, record, desired, services.store)
            if desired.idle is not None:
                return done(key, desired.idle, "Idle", report=Report(detail=desired.idle))
            return unplanned(rp)
        conflict = rp.plan.conflict if rp.plan is not None else None
        host = desired.launch.host
        Hosts.of(services).conflict(key, host, conflict is not None)
        if conflict is not None:
            return terminal(key, f"Conflict: {conflict}", "Conflict",
                            report=Report(detail=conflict))
        plan, session = self._prepared(ctx, desired.launch)
        engine = session.engine()
        telemetry = session.telemetry(plan.spec.telemetry.dcgmUrl,
                                      plan.spec.telemetry.intervalSeconds)
        progress = self._progress(ctx, key)
        spec = plan.spec
        if spec.executor == "host":  # its secrets read before the run ID is claimed
            job = self._job_work(ctx, plan, session)
            runs.launch_record(services.store, plan)
            # The job enforces its own budget on the Host; the follow has a backstop.
            return self._run(ctx, key, spec.runId, job, desired)
        runs.launch_record(services.store, plan)

        def work(stop: threading.Event) -> str:
            return runs.execute(plan, engine, services.store, services.instance, stop, progress,
                                telemetry)
        return self._run(ctx, key, spec.runId, work, desired,
                         float(spec.budgetSeconds - spec.cleanupSeconds),
                         f"its budget of {spec.budgetSeconds}s ran out ({spec.cleanupSeconds}s "
                         "of it kept for cleanup)")

    def _prepared(self, ctx: PassContext, plan: runs.RunPlan
                  ) -> tuple[runs.RunPlan, HostSession]:
        """The run's Host session, and its plan with the template's image on that Host
        (pulled now if it must be: before the run is claimed or its job is created)."""
        assert ctx.spec_set is not None
        host = ctx.spec_set.host(plan.host)
        assert host is not None  # crossref guarantees it
        session = Hosts.of(ctx.services).session(host)
        if plan.desired.pull is not None:
            plan = self._pulled(ctx, plan.resource, plan, session)
        return plan, session

    def _job_absent(self, ctx: PassContext, record: ResourceStatus,
                    known: ExperimentStatusFacts) -> bool:
        """No job of this run on its Host (looked up now: the plan read the record, and
        found no claim of its runner's creation and no run of it on this process's board)."""
        from controllers.kinds.experiments.runner import hostjob

        engine = self._session(ctx, record).engine()
        return hostjob.find(engine, ctx.services.instance, record.key, known.run_id or "") is None

    def _start_launched(self, ctx: PassContext, desired: ExperimentDesired,
                        plan: runs.RunPlan) -> Result:
        """A run whose launch was recorded but whose job was never created (its Host moved
        to another replica, or the daemon ended, between the two): nothing of it ran, so it
        starts now rather than ending INCONCLUSIVE."""
        log.info("experiment.start_launched", resource=plan.resource, run_id=plan.spec.runId)
        plan, session = self._prepared(ctx, plan)
        return self._run(ctx, plan.resource, plan.spec.runId,
                         self._job_work(ctx, plan, session), desired)

    def _under_way(self, ctx: PassContext, record: ResourceStatus) -> Result:
        """A run that is not terminal: report it, or recover it if this process lost it."""

        services, known = ctx.services, ExperimentStatusFacts.of(record)
        assert known.run_id is not None
        if RunBoard.of(services).running(known.run_id):
            return recheck(record.key, f"{known.phase}: run {known.run_id} under way",
                           known.phase or "Running", RUN_POLL_S)
        session = self._session(ctx, record)
        if FrozenRun.frozen(record).executor == "host":
            from controllers.kinds.experiments.runner import hostjob

            job = hostjob.find(session.engine(), services.instance, record.key, known.run_id)
            if job is not None:  # the job ran on while this process was away: follow it
                log.info("experiment.job_attached", resource=record.key, run_id=known.run_id,
                         runner=job.name)
                return self._run(ctx, record.key, known.run_id,
                                 self._follow_work(ctx, record.key, session, job), None)
        log.warning("experiment.interrupted", resource=record.key, run_id=known.run_id)
        return self._run(ctx, record.key, known.run_id, self._recovery(ctx, record.key, session),
                         None)

    def _recovery(self, ctx: PassContext, key: Key, session: HostSession) -> Work:
        """Recover the run (INCONCLUSIVE after its cleanup) from its record as it is then."""
        from controllers.kinds.experiments import run as runs

        services = ctx.services

        def work(stop: threading.Event) -> str:
            record = services.store.load(key)
            assert record is not None
            known = ExperimentStatusFacts.of(record)
            root = _recorded_root(known, services.store.root)
            return runs.recover(services.store, record, session.engine(), services.instance,
                                root, stop, _recorded_token(record),
                                session.telemetry(_recorded_dcgm_url(record)))
        return work

    def _job_work(self, ctx: PassContext, plan: runs.RunPlan, session: HostSession) -> Work:
        """Start the run as a job on its Host, then follow it (``controllers.kinds.experiments.
        runner.hostjob``). The secrets are read now, at use, and go to the job's stdin."""
        from controllers.kinds.experiments.runner import hostjob
        from controllers.kinds.experiments.runner.job import secret_values

        secrets = secret_values(plan)

        def work(stop: threading.Event) -> str:
            if stop.is_set():  # stopped while queued: nothing was created, nothing claimed
                raise Stopped(f"run {plan.spec.runId} stopped before its job was created")
            _claim_runner(ctx.services.store, plan.resource)
            try:
                job = hostjob.start(session.engine(), plan, ctx.services.instance,
                                    hostjob.socket_on(session.host), secrets)
            except ControllerError as exc:  # the recovery that follows says why
                _note_reason(ctx.services.store, plan.resource, f"the job did not start: {exc}")
                raise
            return self._follow_work(ctx, plan.resource, session, job)(stop)
        return work

    def _follow_work(self, ctx: PassContext, key: Key, session: HostSession,
                     job: hostjob.Job) -> Work:
        """Follow the job to its verdict; a runner that ended without one is recovered here,
        unless this run was stopped (the pass after it recovers it)."""
        from controllers.kinds.experiments.runner import hostjob

        services = ctx.services
        board = RunBoard.of(services)

        def work(stop: threading.Event) -> str:
            record = services.store.load(key)
            known, frozen = ExperimentStatusFacts.of(record), FrozenRun.frozen(record)
            root = _recorded_root(known, services.store.root)
            try:
                return hostjob.follow(
                    session.engine, job, services.store, key, root, known.run_id or "", stop,
                    lambda: board.closing, frozen.cleanup_seconds + hostjob.STOP_MARGIN_S,
                    frozen.budget_seconds + hostjob.STOP_MARGIN_S)
            except hostjob.RunnerEnded as exc:
                if not ExperimentStatusFacts.of(services.store.load(key)).reason:
                    _note_reason(services.store, key, str(exc))  # the job's own reason first
                if stop.is_set():
                    raise Stopped(f"run {known.run_id} stopped: {exc}") from None
                return self._recovery(ctx, key, session)(stop)
        return work

    def _run(self, ctx: PassContext, key: Key, run_id: str, work: Work,
             desired: ExperimentDesired | None, budget_s: float | None = None,
             overrun: str = "") -> Result:
        board, store = RunBoard.of(ctx.services), ctx.services.store

        def on_overrun() -> bool:
            return _note_reason(store, key, overrun, unless_cleaning=True)
        if ctx.wait_ready:  # one-shot apply: the caller waits for the verdict
            board.run_inline(run_id, work, budget_s, on_overrun)
            record = store.load(key)
            launched = desired is not None  # not itself a recovery: no loop
            if launched and record is not None and ExperimentStatusFacts.of(record).result is None:
                return self._under_way(ctx, record)  # stopped (over budget): recover now
            return self._verdict(key, record, desired, store)
        if not board.start(run_id, work, budget_s, on_overrun,
                           on_end=lambda: ctx.hooks.wake(key)):
            return stopped(key, f"run {run_id} cannot start now (shutting down)")
        return recheck(key, f"run {run_id} started", "Running", RUN_POLL_S, changed=True)

    def _verdict(self, key: Key, record: ResourceStatus | None,
                 desired: ExperimentDesired | None, store: Store) -> Result:
        from controllers.kinds.experiments.types import run_type

        known = ExperimentStatusFacts.of(record)
        if desired is not None and desired.refused is not None:
            return terminal(key, f"RunIdReused: {desired.refused}", "RunIdReused")
        if known.result is None:
            return recheck(key, f"{known.phase}: run {known.run_id} under way",
                           known.phase or "Running", RUN_POLL_S)
        if known.evidence and known.run_id:
            _keep_bundle(store, known.run_id, Path(known.evidence))
        message = f"{known.result}: run {known.run_id} ({known.reason}); evidence in " \
                  f"{known.evidence}"
        # A template that waits on the verdict learns of it at once (a Deployment on its
        # qualification); a canary's or a benchmark's does not, and is not woken for it (a
        # recovery, which has no spec at hand, wakes it: that is rare).
        informs = desired is None or run_type(desired.experiment.spec).informs_template
        woken = (Key("Deployment", known.template),) if known.template and informs else ()
        return (done if known.result == "PASS" else terminal)(key, message, known.result,
                                                               wake=woken)

    def _engine(self, ctx: PassContext, record: ResourceStatus) -> DockerEngine:
        return self._session(ctx, record).engine()

    def _session(self, ctx: PassContext, record: ResourceStatus) -> HostSession:
        services = ctx.services
        host = ExperimentStatusFacts.of(record).host or "local"
        hosts = Hosts.of(services)
        return hosts.session(hosts.host_for(ctx.spec_set, host, record))

    def _pulled(self, ctx: PassContext, key: Key, plan: runs.RunPlan,
                session: HostSession) -> runs.RunPlan:
        """The run's plan once its template's image is on the Host (``pulls.bring``: a
        phase the daemon looks at, a wait for ``apply``); nothing of the run exists yet."""
        need = plan.desired.pull
        assert need is not None
        try:
            bring(Pulls.of(ctx.services), session, need, key, wake=ctx.hooks.wake,
                  wait=ctx.wait_ready, timeout_s=ctx.timeout_s, stop=ctx.stop,
                  progress=self._progress(ctx, key))
        except StillProgressing as exc:
            said = str(exc)
            ctx.services.store.update(key, lambda st: st.set_condition(
                "Progressing", "True", "Pulling", said))
            raise
        image_id, digest = verify(session, need.image)
        return dataclasses.replace(plan, desired=dataclasses.replace(
            plan.desired, image_id=image_id, image_digest=digest, pull=None))

    def _progress(self, ctx: PassContext, key: str) -> Callable[[str], None]:
        def say(message: str) -> None:
            ctx.services.progress(key, message)
        return say

    # --- delete ----------------------------------------------------------------------------

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        return guarded(record.key, lambda: self._prune(ctx, record))

    def background(self, services: Services, runtime: Runtime) -> None:
        return None  # runs start on the run board when a pass launches them

    def _prune(self, ctx: PassContext, record: ResourceStatus) -> Result:
        """The spec is gone: stop nothing that is terminal, clean up whatever a run left
        running, keep the evidence."""
        from controllers.kinds.experiments import run as runs

        services, known = ctx.services, ExperimentStatusFacts.of(record)
        board = RunBoard.of(services)
        if known.run_id and board.running(known.run_id):
            _note_reason(services.store, record.key, "its spec was removed while it ran")
            board.abort(known.run_id)
            return recheck(record.key, f"stopping run {known.run_id}: its spec was "
                           "removed; pruned once it has cleaned up", "RunUnderWay", RUN_POLL_S)
        if known.run_id and known.result is None:
            self._under_way(ctx, record)  # interrupted: recover (INCONCLUSIVE + cleanup) first
            if board.running(known.run_id):
                return recheck(record.key, "cleaning up an interrupted run",
                               "RunUnderWay", RUN_POLL_S)
        _, names = runs.inventory_of(services.store.load(record.key))
        left = remove_containers(self._engine(ctx, record), services.instance, record.key,
                                 names, 10)
        if left:
            return retry(record.key, "left behind: " + "; ".join(left), "LeftBehind")
        services.store.delete(record.key)
        where = f"; evidence kept in {known.evidence}" if known.evidence else ""
        services.store.events.append(record.key, "Normal", "Deleted",
                                     f"record removed{where}")
        return done(record.key, f"deleted{where}", changed=True)


def _never_started(ctx: PassContext, record: ResourceStatus,
                   known: ExperimentStatusFacts) -> bool:
    """A run under way, as a job, whose runner's creation was never recorded and that this
    process is not running: it may be started (``_job_absent`` then looks on its Host)."""
    return (known.result is None and known.runner_claimed_at is None and known.runner is None
            and FrozenRun.frozen(record).executor == "host"
            and not RunBoard.of(ctx.services).running(known.run_id or ""))


def _run_under_way(store: Store, key: Key) -> bool:
    """Whether ``key``'s record is a run's under way (launched, no verdict yet)."""
    try:
        known = ExperimentStatusFacts.of(store.load(key))
    except StateError:
        return False
    return bool(known.run_id) and known.result is None


def _claim_runner(store: Store, key: Key) -> None:
    """Record, ahead of creating it, that the run's runner is being created: from here on a
    job may exist on the Host, and no other holder starts the run again (a replica whose
    share moved meanwhile is fenced here, before any Docker call)."""
    def mutate(st: ResourceStatus) -> None:
        known = ExperimentStatusFacts.of(st)
        known.runner_claimed_at = utc_now()
        known.put(st)
    store.update(key, mutate, create=False)


def _note_reason(store: Store, key: Key, reason: str, unless_cleaning: bool = False) -> bool:
    """Say why a run is stopped early (its recovery reports it as the INCONCLUSIVE reason);
    False, noting nothing, when it is terminal or (``unless_cleaning``) already cleaning up:
    cleanup has its own deadline and is never cut short."""
    noted = []

    def mutate(st: ResourceStatus) -> None:
        known = ExperimentStatusFacts.of(st)
        if known.result is None and not (unless_cleaning and known.phase in CLEANING):
            known.reason = reason
            known.put(st)
            noted.append(True)
    store.update(key, mutate, create=False)
    return bool(noted)


def _recorded_token(record: ResourceStatus) -> str | None:
    """The run's service token, from the template spec frozen at launch. Every secret of that
    spec is resolved too, so that the redactor knows each value before the recovery copies
    the service's log into the evidence (after a restart nothing else has resolved them)."""
    try:
        spec = DeploymentSpec.model_validate((record.applied_spec or {}).get("template") or {})
    except ValueError:
        return None
    for ref in spec.secrets:
        try:
            resolve(ref)
        except ControllerError:
            continue  # not available now: it cannot be redacted, nor can the service echo it
    try:
        return api_token(spec)
    except ControllerError:
        return None


def _recorded_dcgm_url(record: ResourceStatus) -> str | None:
    """The DCGM exporter the interrupted run was measured with (None: the Host's own)."""
    try:
        return TelemetrySpec.model_validate(FrozenRun.frozen(record).telemetry).dcgmUrl
    except ValidationError:
        return None
