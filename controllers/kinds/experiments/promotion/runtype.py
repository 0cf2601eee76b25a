"""``type: promotion``: a Deployment's candidate measured against the version it runs, at once.

The run (a job on the Host, like any Experiment's) starts the candidate fresh in the room
``spec.promotion.candidate`` names, publishes the canary's sources for each side (the same
pictures, each side its own publishers), and runs the same canary against both services in
the same window: the candidate, and the running service at the
Deployment's own port (``baseline: sideBySide``), which is never stopped, restarted or touched
beyond the canary's own streams, each deleted and proven gone. Each side's canary writes its
evidence under ``runs/<side>/`` of this run; the decision (``gates.decide``) reads both from
there and writes ``decision.json``, one gate file per gate and the comparison in
``report.md``. With ``gates.capacity``, the candidate and then a fresh copy of the running
version (the run's ``baseline`` companion, in the same room) are each searched for their
highest stable stream count once the canary is done (``promotion.capacity``). The run's
verdict is the decision's: PASS promotes, FAIL rejects, INCONCLUSIVE leaves the running version
serving and says to measure again.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from controllers.clients.http_api import service_url
from controllers.clients.rtvi_client import RtviClient
from controllers.errors import ControllerError
from controllers.kinds.deployment.facts import (
    QUALIFYING,
    DeploymentStatusFacts,
    PromotionFacts,
)
from controllers.kinds.deployment.promotion import current_run
from controllers.kinds.experiments import plots
from controllers.kinds.experiments.canary.runtype import CanaryRun
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.promotion import accepted, capacity
from controllers.kinds.experiments.promotion.bundle import (
    DECISION,
    RUNS_DIR,
    VERDICTS,
    gate_file,
)
from controllers.kinds.experiments.promotion.gates import Decision, Gates, Measured, decide
from controllers.kinds.experiments.promotion.measured import side_measured
from controllers.kinds.experiments.reportparts import Section, cell
from controllers.kinds.experiments.runtype import PlannedStep, RunContext
from controllers.kinds.experiments.service import RunService
from controllers.kinds.experiments.streams import CanarySource, canary_sources
from specs.experiments.canary import CanaryExperimentSpec
from specs.experiments.promotion import PromotionExperimentSpec
from specs.models import DeploymentSpec
from state.evidence import Evidence, Verdict
from state.keys import Key
from state.store import Store

SIDES = ("candidate", "baseline")
GPU_SETTLE_S = 15.0  # a stopped candidate's GPU memory is given this long to come back
# The gates every qualification judges (the canary measures all three on both sides).
DECLARED = ("latency", "dropped chunks", "isolation")


def judged(spec: PromotionExperimentSpec) -> tuple[str, ...]:
    """The gates this qualification judges: the canary's, and capacity when it searches."""
    return (*DECLARED, *(("capacity",) if spec.promotion.gates.capacity is not None else ()))


def as_canary(spec: PromotionExperimentSpec) -> CanaryExperimentSpec:
    """The canary each side runs: the qualification's load, its measurement, its budget."""
    data = spec.model_dump(mode="json", exclude={"promotion", "type"})
    return CanaryExperimentSpec.model_validate(
        {**data, "type": "canary", "canary": spec.promotion.canary.model_dump(mode="json")})


def side_sources(sources: list[CanarySource], side: str) -> list[CanarySource]:
    """``side``'s own copies of the canary's sources (the same pictures, its own publishers):
    two services that open one shared RTSP media at the same instant were seen to get no
    frame from it for a whole window, on both sides at once, which measures the publisher."""
    found = []
    for src in sources:
        name = f"{side[0]}-{src.name}"
        spec = src.desired.spec.model_copy(update={"name": name})
        found.append(dataclasses.replace(src, name=name, desired=dataclasses.replace(
            src.desired, name=name, spec=spec)))
    return found


def side_evidence(evidence: Evidence, side: str) -> Evidence:
    """Where ``side``'s canary writes: ``runs/<side>/`` inside the run (sealed with it)."""
    return Evidence(evidence.path(f"{RUNS_DIR}/{side}"), evidence.redactor)


def gates_of(spec: PromotionExperimentSpec) -> Gates:
    limits = spec.promotion.gates
    return Gates(max_p95_regression=limits.p95_regression,
                 max_capacity_loss=limits.maxCapacityLoss,
                 max_gpu_memory_growth_mib=float(limits.maxGpuMemoryGrowthMiB))


class PromotionType:
    """``type: promotion``: the candidate fresh, the running version as it serves."""

    name = "promotion"
    informs_template = True  # its Deployment promotes or holds on the verdict

    def local_only(self, spec: PromotionExperimentSpec) -> bool:
        return False

    def declared_gates(self, spec: PromotionExperimentSpec) -> list[str]:
        return [gate_file(g) for g in judged(spec)]

    def earlier(self, spec: PromotionExperimentSpec, store: Store) -> dict[str, str]:
        """With ``baseline: lastAccepted``, the run that promoted the running version (its
        Deployment's record names one per version; none: it is measured side by side)."""
        if spec.promotion.baselineFrom != "lastAccepted":
            return {}
        record = store.load(Key("Deployment", spec.promotion.deployment))
        running = record.observed_generation if record is not None else None
        found = (DeploymentStatusFacts.of(record).accepted or {}).get(running or "")
        return {accepted.ROLE: found} if found else {}

    def companions(self, spec: PromotionExperimentSpec, store: Store
                   ) -> dict[str, DeploymentSpec]:
        """With a capacity gate, the running version as its record says it was applied: a
        fresh copy of it is searched in the room (the running service never is)."""
        if spec.promotion.gates.capacity is None:
            return {}
        record = store.load(Key("Deployment", spec.promotion.deployment))
        applied = record.applied_spec if record is not None else None
        if not applied:
            raise ControllerError(f"the capacity gate searches a copy of the running version, "
                                  f"and Deployment {spec.promotion.deployment}'s record holds "
                                  "no applied spec to copy")
        try:
            return {capacity.BASELINE: DeploymentSpec.model_validate(applied)}
        except ValueError as exc:
            raise ControllerError(f"the running version's recorded spec no longer reads as a "
                                  f"Deployment spec ({str(exc).splitlines()[0]}): its capacity "
                                  "cannot be searched") from None

    def run_id(self, spec: PromotionExperimentSpec, store: Store) -> str:
        """The spec's run ID, or the attempt at the same candidate its Deployment asked for
        (``reconciler promote --rerun``: ``<runId>-r1``, ...)."""
        return current_run(_asked(spec, store), spec.runId, spec.promotion.candidate)

    def waits_for(self, spec: PromotionExperimentSpec, store: Store) -> str | None:
        """None while the Deployment asks for this very candidate to be qualified (not once it
        judged it: a candidate committed again is judged by the run it had)."""
        run = spec.promotion
        asked = _asked(spec, store)
        if asked is not None and asked.candidate == run.candidate and asked.run == spec.runId:
            if asked.phase == QUALIFYING:
                return None
            return (f"nothing to qualify: Deployment {run.deployment} judged candidate "
                    f"{run.candidate[:12]} by run {asked.run} ({asked.phase})")
        return (f"nothing to qualify: Deployment {run.deployment} has not asked for candidate "
                f"{run.candidate[:12]} (it runs it already, or has not seen it yet)")

    def planned(self, spec: PromotionExperimentSpec) -> list[PlannedStep]:
        run = spec.promotion
        baseline = service_url(run.baseline.address, run.baseline.host)
        return [PlannedStep("publish", f"{2 * run.canary.streams} source(s)", "the canary's "
                            "sources, the same pictures for each side from its own publishers"),
                PlannedStep("measure", f"candidate and baseline ({baseline})", (
                    "the same canary on both at once; the running service keeps serving and "
                    "only its canary streams are removed") + (
                    "; with baseline: lastAccepted, the candidate alone when the run that "
                    "promoted the running version measured it under this load on this Host "
                    "and GPU model" if run.baselineFrom == "lastAccepted" else "")),
                *self._searched(spec),
                PlannedStep("judge", ", ".join(judged(spec)),
                            f"p95 at most {run.gates.maxP95Regression} slower beyond noise "
                            "(Mann-Whitney U over every chunk of both sides)")]

    def _searched(self, spec: PromotionExperimentSpec) -> list[PlannedStep]:
        cap = spec.promotion.gates.capacity
        if cap is None:
            return []
        return [PlannedStep("search", f"capacity {cap.initialStreamCount}..{cap.maxStreamCount}"
                            " stream(s), candidate then a fresh copy of the running version",
                            f"{cap.windowSeconds}s windows, p95 <= {cap.maxP95LatencyMs:g} ms, "
                            f"a fresh service per window; at most "
                            f"{spec.promotion.gates.maxCapacityLoss} stream(s) fewer")]

    def execute(self, ctx: RunContext[PromotionExperimentSpec]) -> tuple[Verdict, str]:
        spec, canary = ctx.spec, as_canary(ctx.spec)
        known = accepted.baseline_for(ctx.evidence, spec, ctx.earlier.get(accepted.ROLE))
        measured_now = SIDES if known.measured is None else ("candidate",)
        ctx.progress(f"baseline: {known.why}")
        candidate = ctx.start_service()
        services = {"candidate": candidate}
        if "baseline" in measured_now:
            services["baseline"] = _baseline(ctx, candidate.token)
        sources = {side: side_sources(canary_sources(canary.canary), side)
                   for side in measured_now}
        urls = {side: ctx.publish(sources[side], canary.canary.publisher)
                for side in measured_now}
        ctx.progress(" and ".join(f"{side} {services[side].url}" for side in measured_now)
                     + f" under the same {canary.canary.streams}-stream canary")
        with ThreadPoolExecutor(max_workers=len(measured_now)) as pool:
            jobs = [pool.submit(contextvars.copy_context().run, _side, ctx, canary, side,
                                services[side], sources[side], urls[side])
                    for side in measured_now]
            for job in jobs:
                job.result()
        ctx.retire_service(candidate, "candidate")
        growth = _gpu_growth(ctx)
        if (cap := spec.promotion.gates.capacity) is not None:
            capacity.search_side(ctx, cap, "candidate", side_evidence(ctx.evidence, "candidate"),
                                 ctx.launch)
            if "baseline" in measured_now:
                capacity.search_side(ctx, cap, "baseline", side_evidence(
                    ctx.evidence, "baseline"), lambda _: ctx.companion(capacity.BASELINE))
        measure = canary.measurement
        sides = {side: side_measured(side_evidence(ctx.evidence, side), measure.warmupRuns,
                                     measure.repetitions, measure.latencySource)
                 for side in measured_now}
        sides["candidate"] = dataclasses.replace(sides["candidate"], gpu_growth_mib=growth)
        if known.measured is not None:
            sides["baseline"] = known.measured
        accepted.keep_candidate(ctx.evidence, spec, sides["candidate"])
        decision = decide(sides["candidate"], sides["baseline"], gates_of(spec))
        write_decision(ctx.evidence, decision, sides, known)
        verdict = VERDICTS[decision.verdict]
        return verdict, "" if verdict == "PASS" else decision.reason()

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        """The comparison, gate by gate, and both sides' latency on one plot."""
        try:
            data = json.loads(evidence.path(DECISION).read_text("utf-8"))
        except (OSError, ValueError):
            return Section()
        gates = data.get("gates") if isinstance(data, dict) else None
        lines = ["## Candidate against the running version", "",
                 f"Decision: {cell(data.get('verdict'))}", "",
                 "| gate | candidate | baseline | allowed | verdict |", "|---|---|---|---|---|"]
        lines += [f"| {cell(g.get('gate'))} | {cell(g.get('candidate'))} | "
                  f"{cell(g.get('baseline'))} | {cell(g.get('allowed'))} | "
                  f"{cell(g.get('verdict'))} |"
                  for g in gates if isinstance(g, dict)] if isinstance(gates, list) else []
        came = data.get("baseline")
        if isinstance(came, dict) and came.get("why"):
            lines += ["", f"Baseline: {cell(came['why'])}."]
        latency = data.get("latency")
        if isinstance(latency, dict) and latency.get("reason"):
            lines += ["", f"Latency: {cell(latency['reason'])}."]
        lines += capacity.capacity_lines(evidence, SIDES, side_evidence)
        series = data.get("latencies")
        if not isinstance(series, dict):
            return Section(lines)
        sides = {s: [float(v) for v in series.get(s) or [] if isinstance(v, int | float)]
                 for s in SIDES}
        p95s = {s: (latency or {}).get(f"{s}_p95_ms") for s in SIDES}
        return Section(lines, plots.latency_side_by_side(
            sides, f"{evidence.folder.name}: candidate and baseline",
            {s: float(v) if isinstance(v, int | float) else None for s, v in p95s.items()}))


def _asked(spec: PromotionExperimentSpec, store: Store) -> PromotionFacts | None:
    """What the Deployment's record says it asked to be qualified."""
    return DeploymentStatusFacts.of(store.load(Key("Deployment", spec.promotion.deployment))
                                    ).promotion


def write_decision(evidence: Evidence, decision: Decision, sides: dict[str, Measured],
                   baseline: accepted.Baseline = accepted.SIDE_BY_SIDE) -> None:
    """``decision.json`` (where the baseline's numbers came from, both sides' latencies for
    the plot) and one gate per gate."""
    evidence.write_json(DECISION, {**decision.record(), "baseline": baseline.record(),
                                   "latencies": {side: list(m.chunk_latencies_ms)
                                                 for side, m in sides.items()}})
    for gate in decision.gates:
        evidence.gate(gate_file(gate.gate), gate.verdict == "pass", gate.line(),
                      {**asdict(gate), "verdict": gate.verdict})


def _gpu_growth(ctx: RunContext[PromotionExperimentSpec]) -> float | None:
    """What the candidate left allocated on the run's GPUs once it stopped, over Preflight
    (MiB, summed; None where the memory is not read). Waits up to ``GPU_SETTLE_S`` for it to
    come back, as the capacity search does after each window."""
    before = ctx.gpu_baseline()
    after, _ = ctx.gpu_back(GPU_SETTLE_S)
    if before is None or not isinstance(after, dict):
        return None
    return float(sum(max(0, after.get(uuid, 0) - mib) for uuid, mib in before.items()))


def _baseline(ctx: RunContext[PromotionExperimentSpec], token: str | None) -> RunService:
    """The running service, as it serves: asked which model it serves, never started here."""
    port = ctx.spec.promotion.baseline
    url = service_url(port.address, port.host)
    client = RtviClient(url, token=token)
    try:
        model = client.model_id()
    except ControllerError as exc:
        raise ControllerError(f"the running service at {url} (the baseline) does not answer: "
                              f"{exc}") from exc
    finally:
        client.close()
    return RunService("", ctx.spec.promotion.deployment, url, url, model, token)


def _side(ctx: RunContext[PromotionExperimentSpec], canary: CanaryExperimentSpec, side: str,
          service: RunService, sources: list[CanarySource], urls: dict[str, str]) -> bool:
    """One side's canary, writing under ``runs/<side>/``, its streams named for its side. The
    running service's streams are deleted here whatever happens: the run's cleanup proves
    only its own services empty, and never lists or touches the running one."""
    noted: list[str] = []

    def note(ids: list[str]) -> None:
        noted.extend(ids)
        ctx.note_streams(ids)
    driver = dataclasses.replace(
        ctx.driver(service, sources, urls, canary.canary.maxTokens,
                   canary.canary.chunkDurationSeconds),
        evidence=side_evidence(ctx.evidence, side), note_streams=note,
        stream_id=lambda part, src: ctx.stream_id(f"{side}-{part}", src),
        progress=lambda message: ctx.progress(f"{side}: {message}"))
    if side == "baseline":
        ctx.note_foreign(service.url)  # before any stream: a recovery cleans there too
    try:
        return CanaryRun(canary, driver).execute()
    finally:
        if side == "baseline" and noted:
            driver.delete(sorted(set(noted)))
