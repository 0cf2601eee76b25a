"""``type: benchmark``: one scenario of NVIDIA's VSS perf harness, run and supervised.

The harness is the real program (``services/rtvi/rt-vlm/perf/benchmark/rtvi_perf_benchmark.py``
of a VSS checkout), spoken to as ``shared/contracts/vss-harness.md`` records it. The order is
the benchmark practice's (perf-testing guide, "Running Benchmarks", "Run Integrity Gates"):

1. ``--list-scenarios`` against the user's config (the harness logs the list on stderr, with
   each scenario's ``benchmark_mode``): a misspelt scenario, or one whose mode is not the
   spec's, fails here, before any service starts (gate ``scenario``).
2. The run's fresh service, and its environment as it runs (the image's own variables
   included): a non-EVS baseline holds no EVS variable, an EVS run holds both that turn EVS on
   (gate ``service-environment``).
3. Runs of 30 minutes or more: the direct 1-frame, 1-token video request first; a hang, a
   timeout, a file asset left in use or unproven cleanup stops the run (gate ``smoke``).
4. The three run handles: CONFIG (the user's config under its own file name, so the harness's
   BCD live-source guard still sees it, with only ``global.output_dir``,
   ``global.rtvi_backend`` = the fresh service's ``/v1`` base and, when ``apiMode`` is set,
   ``vlm_api_mode`` changed), REPORT (the report directory, with the ``--output-json``
   document), LOG (the harness's output). ``RTVI_BACKEND`` is set too, so neither a ``.env``
   in the checkout nor the operator's shell can point the harness at another service. The
   harness runs where the run does (``harnessproc``): a process of its own session beside an
   in-process run, a container with the Host's userland beside a job; either is recorded in
   the run's inventory before it starts, so a crash leaves nothing the recovery cannot end.
5. Supervision: a log whose mtime is older than ``logStaleSeconds`` is *inspected* (service
   health, active streams, the process) and the finding recorded — never killed for it
   (max-stream windows and freshness waits are legitimately quiet); but a run that went quiet
   beyond its window cannot vouch for its progress, so it is not PASS (INCONCLUSIVE when
   nothing else failed).
6. The harness's acceptance (gate ``harness``, ``harnessreport``): exit 0, and the
   ``--output-json`` summary's ``overall_status`` PASS with ``failed`` 0 (PARTIAL is a failed
   test case, which the harness itself exits 0 on); for modes the harness writes no JSON for,
   this run's ``execution_summary.json`` with no failed test case. A refusal quotes the
   harness's own reasons. File-burst sweeps keep every concurrency level, the last clean level
   with its p95/p99 and the exact failure text; max-live searches keep their boundary.
7. EVS pairing (gate ``evs-pairing``, with ``pairWith``): the other side's run of the same
   scenario; input tokens per chunk that did not change between baseline and EVS are a
   misconfiguration (EVS did not prune anything).
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controllers.errors import ControllerError
from controllers.kinds.experiments.benchmark import harnessreport
from controllers.kinds.experiments.benchmark import report as benchreport
from controllers.kinds.experiments.benchmark.report import (
    BENCH_FILE,
    BenchDocument,
    Pairing,
    StaleLog,
)
from controllers.kinds.experiments.driver import GATE_SMOKE, ONE_FRAME_ONE_TOKEN
from controllers.kinds.experiments.filechat import PinnedFile, ask
from controllers.kinds.experiments.harnessproc import (
    HarnessError,
    HarnessRun,
    Launcher,
    LocalLauncher,
    interpreter_root,
)
from controllers.kinds.experiments.manifest import RunManifest, read_manifest
from controllers.kinds.experiments.reportparts import Section
from controllers.kinds.experiments.runtype import PlannedStep, RunContext, StartsWhenLaunched
from controllers.kinds.experiments.service import RunService
from controllers.waiting import Stopped, until
from specs.experiments.base import ExperimentSpecBase
from specs.experiments.benchmark import BenchmarkExperimentSpec, BenchmarkSpec
from specs.trust import R_TRUST, enforced
from state.evidence import Evidence, Verdict

GATE_SCENARIO = "scenario"
GATE_ENVIRONMENT = "service-environment"
GATE_HARNESS = "harness"
GATE_PAIRING = "evs-pairing"
EVS_VARIABLES = ("VIA_EVS_SESSION", "VLM_VIDEO_PRUNING_RATE", "VLLM_EVS_SIMILARITY_THRESHOLD",
                 "VIA_EVS_TOKEN_BUDGET")
EVS_ON = ("VIA_EVS_SESSION", "VLM_VIDEO_PRUNING_RATE")  # both, or EVS does nothing
LIST_TIMEOUT_S = 60.0
POLL_S = 1.0
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")  # nothing else of ours: no secrets
API_BASE = "/v1"  # the harness appends /models, /streams/add, ... to global.rtvi_backend
CONFIG_FOLDER = "output/config"  # the CONFIG handle: <folder>/<the config's own file name>
REPORT_HANDLE = "output/report"
RESULT_JSON = "vss-result.json"  # --output-json, inside the report directory
LOG_HANDLE = "logs/harness.log"
LOG_TAIL_BYTES = 1 << 20  # the harness's reasons are at the end of its log
SCENARIO_FILES = ("filepath", "rtsp_urls_file")  # what a scenario's video entry reads
HARNESS_INTERRUPT_S = 35.0  # a stopped harness's SIGINT cleanup: it waits 30 s for its readers


def harness_config_path(bench: BenchmarkSpec) -> Path:
    return Path(bench.harness.workdir) / bench.harness.config


def list_scenarios(bench: BenchmarkSpec, launcher: Launcher | None = None
                   ) -> tuple[dict[str, str] | None, str]:
    """The config's scenarios and their ``benchmark_mode`` as the harness lists them (None and
    why, when it cannot say); ``launcher``: where the harness runs (None: here)."""
    argv = [*bench.harness.argv, "--config", str(harness_config_path(bench)), "--list-scenarios"]
    where = launcher or LocalLauncher(note=lambda _name: None)
    try:
        code, said = where.once(argv, bench.harness.workdir, _env(bench, None, None),
                                harness_reads(bench, None), LIST_TIMEOUT_S)
    except HarnessError as exc:
        return None, str(exc)
    if code != 0:
        tail = harnessreport.reasons(None, said) or said.strip().splitlines()[-3:]
        return None, f"--list-scenarios exited {code}: {' | '.join(tail)}"
    return harnessreport.listed_scenarios(said), ""


def harness_reads(bench: BenchmarkSpec, data: dict[str, Any] | None) -> list[str]:
    """The Host folders and files the harness reads, for a harness that runs in a container
    (``harnessproc.host_mounts``): its working directory, its config's folder, its
    interpreter's virtual environment, the folders of absolute argv items, and the files the
    scenario's videos name (``scenario_files``) when ``data`` (the config) is given."""
    harness = bench.harness
    policy = enforced()
    if policy is not None:  # judged at validate; a link planted since then may lead out now
        for where, message, _ in policy.findings(bench):
            if where[:1] == ("harness",):  # its checkout, config and arguments: before it runs
                raise HarnessError(f"{'.'.join(map(str, where))}: {message} ({R_TRUST})")

    def folder_of(item: str) -> str:
        """An argument's folder is bound (a program imports beside itself), unless the
        operator's folders hold the argument but not its folder: then the argument alone."""
        parent = posixpath.dirname(item)
        if policy is None or policy.harness_reads(parent):
            return parent
        return item

    return [harness.workdir, str(harness_config_path(bench).parent),
            *interpreter_root(harness.argv),
            *(folder_of(a) for a in harness.argv[1:] if a.startswith("/")),
            *(path for _, path in scenario_files(bench, data))]


def scenario_files(bench: BenchmarkSpec, data: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(key, absolute normalised path) of each file the scenario's videos name
    (``filepath``, ``rtsp_urls_file``; a relative one is the working directory's)."""
    scenarios = data.get("test_scenarios") if data is not None else None
    scenario = scenarios.get(bench.scenario) if isinstance(scenarios, dict) else None
    videos = scenario.get("videos") if isinstance(scenario, dict) else None
    found = []
    for video in videos if isinstance(videos, list) else []:
        for key in SCENARIO_FILES:
            named = video.get(key) if isinstance(video, dict) else None
            if isinstance(named, str) and named:
                found.append((key, posixpath.normpath(
                    posixpath.join(bench.harness.workdir, named))))
    return found


def trusted_config(bench: BenchmarkSpec) -> dict[str, Any]:
    """The user's harness config (``user_config``), refused (HarnessError) when a file its
    scenario names lies outside the folders the operator lets the harness and media be read
    from: the spec's own paths were judged at load, but the config is a file, and what it
    names is read (and, on a Host, bound into the harness's container) only here."""
    data = user_config(bench)
    policy = enforced()
    if policy is None:
        return data
    outside = [f"{key} {path!r}" for key, path in scenario_files(bench, data)
               if not policy.harness_reads(path)]
    if outside:
        raise HarnessError(
            f"the harness config {harness_config_path(bench)} names {', '.join(outside[:3])}"
            f"{f' and {len(outside) - 3} more' if len(outside) > 3 else ''}, outside the "
            f"folders harness and media may be read from ({R_TRUST}; set by {policy.origin})")
    return data


def scenario_problem(bench: BenchmarkSpec, listed: dict[str, str] | None, why: str) -> str:
    """Why the spec's scenario cannot run as declared ("" when it can)."""
    if listed is None:
        return why
    if bench.scenario not in listed:
        return (f"{bench.scenario} is not in the config's scenarios: "
                f"{', '.join(listed) or 'none listed'}")
    if listed[bench.scenario] != bench.mode:
        return (f"{bench.scenario} is a {listed[bench.scenario]} scenario in the config, but "
                f"the spec says mode: {bench.mode} (modes are never compared across)")
    return ""


def user_config(bench: BenchmarkSpec) -> dict[str, Any]:
    """The user's harness config, read once per run (HarnessError when it cannot be, or when
    it now leads outside the operator's harness folders: a link planted after validation)."""
    policy = enforced()
    path = str(harness_config_path(bench))
    if policy is not None and not policy.allowed("harness", path):
        raise HarnessError(f"the harness config {path} leads to "
                           f"{os.path.realpath(path)!r}, outside the folders harness may be "
                           f"read from ({R_TRUST}; set by {policy.origin})")
    try:
        data = yaml.safe_load(harness_config_path(bench).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise HarnessError(f"cannot read the harness config {harness_config_path(bench)}: "
                           f"{exc}") from None
    if not isinstance(data, dict):
        raise HarnessError(f"the harness config {harness_config_path(bench)} is not a mapping")
    return data


def derived_config(bench: BenchmarkSpec, report_dir: Path, url: str,
                   data: dict[str, Any] | None = None) -> str:
    """The CONFIG handle's text: the user's config (``data``, else read now) with the report
    directory, the service's API base (``<url>/v1``) and, when ``apiMode`` is set, the
    scenario's ``vlm_api_mode`` (on the scenario and on any video entry that sets its own)
    changed; nothing else."""
    data = user_config(bench) if data is None else data
    _set(data, bench.harness.outputDirKey, str(report_dir))
    _set(data, bench.harness.serviceUrlKey, api_base(url))
    scenarios = data.get("test_scenarios")
    target = scenarios.get(bench.scenario) if isinstance(scenarios, dict) else None
    if bench.apiMode is not None and isinstance(target, dict):
        target["vlm_api_mode"] = bench.apiMode
        for video in target.get("videos") or []:
            if isinstance(video, dict) and "vlm_api_mode" in video:
                video["vlm_api_mode"] = bench.apiMode
    return yaml.safe_dump(data, sort_keys=False)


def bcd_suffix(bench: BenchmarkSpec, data: dict[str, Any]) -> str:
    """``-bcd`` when the user's ``output_dir`` turned the harness's BCD live-source guard on
    (it contains ``bcd``): the run's report folder keeps it on."""
    node: Any = data
    for key in bench.harness.outputDirKey.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return "-bcd" if "bcd" in str(node or "").lower() else ""


def api_base(url: str) -> str:
    return url.rstrip("/") + API_BASE


def _set(data: dict[str, Any], dotted: str, value: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        child = data.get(key)
        if not isinstance(child, dict):
            child = data[key] = {}
        data = child
    data[last] = value


def harness_argv(bench: BenchmarkSpec, config: Path, output_json: Path) -> list[str]:
    argv = [*bench.harness.argv, "--config", str(config), "--scenario", bench.scenario,
            "--output-json", str(output_json)]
    if bench.initialStreamCount is not None:
        argv += ["--initial-stream-count", str(bench.initialStreamCount)]
    if bench.addStreamCount is not None:
        argv += ["--add-stream-count", str(bench.addStreamCount)]
    if bench.binarySearchRefinement is not None:
        argv.append("--binary-search-refinement" if bench.binarySearchRefinement
                    else "--no-binary-search-refinement")
    if bench.concurrencyLevels:  # nargs="+": one argv item per level
        argv += ["--concurrency-levels", *(str(n) for n in bench.concurrencyLevels)]
    return argv


def _env(bench: BenchmarkSpec, run_id: str | None, url: str | None) -> dict[str, str]:
    """The harness's environment: a few of ours (no secrets), the spec's harness knobs, the
    run's service (``RTVI_BACKEND`` wins over a ``.env`` and over the config) and API mode."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV} | dict(bench.harness.env)
    if bench.apiMode is not None:
        env["RTVI_VLM_API_MODE"] = bench.apiMode
    if url is not None:
        env["RTVI_BACKEND"] = api_base(url)
    return env | ({"RTVI_RECONCILER_RUN_ID": run_id} if run_id else {})


def environment_problems(names: list[str] | None, evs: bool) -> list[str]:
    if names is None:
        return ["the service's environment cannot be read"]
    if evs:
        missing = [n for n in EVS_ON if n not in names]
        return [f"an EVS run without {', '.join(missing)}: EVS would prune nothing"] if (
            missing) else []
    found = [n for n in EVS_VARIABLES if n in names]
    return [f"a non-EVS baseline with {', '.join(found)} set (the template's or baked into "
            "the image): it would measure EVS"] if found else []


def _in_bundle(folder: Path, path: str) -> str:
    """``path`` relative to the bundle ``folder`` (as it is, when outside it)."""
    try:
        return str(Path(path).relative_to(folder))
    except ValueError:
        return path


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


# --- the type --------------------------------------------------------------------------------

class BenchmarkType(StartsWhenLaunched):
    """``type: benchmark``: the VSS harness, supervised."""

    name = "benchmark"

    def local_only(self, spec: BenchmarkExperimentSpec) -> bool:
        return spec.executor != "host"  # a job starts the harness on its Host

    def declared_gates(self, spec: BenchmarkExperimentSpec) -> list[str]:
        bench = spec.benchmark
        return [GATE_SCENARIO, GATE_ENVIRONMENT, *([GATE_SMOKE] if spec.smokes() else []),
                GATE_HARNESS, *([GATE_PAIRING] if bench.pairWith else [])]

    def planned(self, spec: BenchmarkExperimentSpec) -> list[PlannedStep]:
        bench = spec.benchmark
        side = "EVS" if bench.evs else "non-EVS baseline"
        paired = f", paired with run {bench.pairWith}" if bench.pairWith else ""
        return [PlannedStep("run", f"harness scenario {bench.scenario}",
                            f"{bench.mode}, {bench.startPolicy} start, "
                            f"{bench.apiMode or 'the config API mode'}, {side}{paired}: "
                            f"{' '.join(bench.harness.argv)} in {bench.harness.workdir}")]

    def execute(self, ctx: RunContext[BenchmarkExperimentSpec]) -> tuple[Verdict, str]:
        return Benchmark(ctx, ctx.spec.benchmark).run()

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        return benchreport.section(evidence)


@dataclass
class Benchmark:
    ctx: RunContext[ExperimentSpecBase]  # a benchmark's, or a capacity search's by the harness
    bench: BenchmarkSpec
    stale_findings: list[StaleLog] = field(default_factory=list)

    def run(self) -> tuple[Verdict, str]:
        ctx, bench = self.ctx, self.bench
        problem = self.check_scenario()
        if problem:
            return "FAIL", f"{GATE_SCENARIO}: {problem}"
        service = ctx.start_service()
        env_names = ctx.env_names(service)
        problems = environment_problems(env_names, bench.evs)
        ctx.evidence.gate(GATE_ENVIRONMENT, not problems, "; ".join(problems) or (
            f"{'EVS on' if bench.evs else 'no EVS variable'} in the running service"),
            {"envNames": env_names, "evs": bench.evs})
        if problems:
            return "FAIL", f"{GATE_ENVIRONMENT}: {'; '.join(problems)}"
        if ctx.spec.smokes():
            smoke_problems = self.smoke(service)
            if smoke_problems:
                return "FAIL", f"{GATE_SMOKE}: {'; '.join(smoke_problems)}"
        outcome, handles = self.run_harness(service)
        return self.judge(outcome, handles)

    def check_scenario(self) -> str:
        """Gate ``scenario``: the harness lists the scenario with the spec's mode ("" when it
        does; else why, before any service starts)."""
        ctx, bench = self.ctx, self.bench
        ctx.progress(f"checking scenario {bench.scenario} with --list-scenarios")
        listed, why = list_scenarios(bench, ctx.launcher)
        problem = scenario_problem(bench, listed, why)
        if not problem:
            try:
                trusted_config(bench)
            except HarnessError as exc:
                problem = str(exc)
        ctx.evidence.gate(GATE_SCENARIO, not problem, problem or (
            f"{bench.scenario} is a {bench.mode} scenario"), {
            "listed": listed, "why": why, "config": str(harness_config_path(bench))})
        return problem

    # --- smoke -----------------------------------------------------------------------------

    def smoke(self, service: RunService) -> list[str]:
        """The direct 1-frame, 1-token video request; its file deleted and no asset left."""
        clip = self.bench.smokeClip
        assert clip is not None
        self.ctx.progress("smoke: one video request, 1 frame, 1 token")
        client = service.client()
        try:
            asked = ask(client, {"model": service.model_id, **ONE_FRAME_ONE_TOKEN,
                                 "messages": [{"role": "user", "content": "One word."}]},
                        self.bench.smokeTimeoutSeconds,
                        PinnedFile(clip.path, clip.sha256, "video"))
            problems = list(asked.problems)
            try:
                files = client.list_files()  # the published listing, not the asset stats
                if files:
                    problems.append(f"{len(files)} file(s) listed after the smoke")
            except ControllerError as exc:
                problems.append(f"cleanup not proven: {exc}")
        finally:
            client.close()
        answer = asked.answer.content if asked.answer is not None else ""
        if asked.answer is not None and not answer.strip():
            problems.append("empty answer")
        took, file_id = asked.seconds, asked.file_id
        self.ctx.evidence.gate(GATE_SMOKE, not problems, "; ".join(problems) or (
            f"answered {answer!r} in {took:.2f}s; file deleted, no asset left"
            if took is not None else "answered"), {"answer": answer, "seconds": took,
                                                    "fileId": file_id})
        return problems

    # --- the harness -----------------------------------------------------------------------

    def run_harness(self, service: RunService) -> tuple[harnessreport.Outcome, dict[str, str]]:
        ctx, bench = self.ctx, self.bench
        evidence = ctx.evidence
        data = trusted_config(bench)
        report_dir = evidence.path(REPORT_HANDLE + bcd_suffix(bench, data))
        report_dir.mkdir(parents=True, exist_ok=True)
        name = Path(bench.harness.config).name  # kept: the BCD guard reads the file name
        config = evidence.write_text(f"{CONFIG_FOLDER}/{name}",
                                     derived_config(bench, report_dir, service.url, data))
        log_path = evidence.path(LOG_HANDLE)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()  # its age is watched from the start, wherever the harness runs
        output_json = report_dir / RESULT_JSON
        handles = {"config": str(config), "report": str(report_dir), "log": str(log_path)}
        argv = harness_argv(bench, config, output_json)
        evidence.event("HarnessLaunching", "the three run handles", **handles, argv=argv,
                       backend=api_base(service.url))
        ctx.progress(f"harness: CONFIG {config}, REPORT {report_dir}, LOG {log_path}")
        started = time.time()
        run = ctx.launcher.start(argv, bench.harness.workdir,
                                 _env(bench, ctx.spec.runId, service.url),
                                 harness_reads(bench, data), log_path)
        evidence.event("HarnessStarted", run.name, process=run.name)
        try:
            exit_code = self._supervise(run, log_path, service)
        finally:
            # Over its budget: let it clean up what it started. Shutting down or removed:
            # end it now (SIGTERM ends a daemon within seconds); cleanup then proves the rest.
            interrupt_s = (0.0 if ctx.stop.is_set()
                           else min(HARNESS_INTERRUPT_S, ctx.spec.cleanupSeconds / 2))
            run.end(interrupt_s)
        scenario_dir = report_dir / bench.scenario
        outcome = harnessreport.Outcome(
            exit_code, bench.mode, harnessreport.load(output_json, newer_than=started),
            harnessreport.load(scenario_dir / "execution_summary.json", newer_than=started),
            _tail(log_path))
        return outcome, handles

    def _supervise(self, run: HarnessRun, log: Path, service: RunService) -> int:
        """Wait for the harness to end (the run's budget and shutdown stop it); a stale log is
        inspected and recorded, once per stale period, never a reason to kill."""
        stale_s = float(self.bench.logStaleSeconds)
        last_inspected = [0.0]

        def check() -> int | None:
            code = run.poll()
            if code is not None:
                return code
            quiet = time.time() - log.stat().st_mtime
            if quiet >= stale_s and time.monotonic() - last_inspected[0] >= stale_s:
                last_inspected[0] = time.monotonic()
                self._inspect(quiet, service, run)
            return None
        code = until(check, timeout_s=float(self.ctx.spec.budgetSeconds), pace=POLL_S,
                     stop=self.ctx.stop)
        if code is None:
            raise Stopped("the harness outlived the run's budget")
        return code

    def _inspect(self, quiet_s: float, service: RunService, run: HarnessRun) -> None:
        finding = StaleLog(logQuietSeconds=round(quiet_s, 1),
                           harnessRunning=run.poll() is None)
        client = service.client()
        try:
            finding.serviceModel = client.model_id()
            finding.streamsListed = len(client.list_streams())
        except ControllerError as exc:
            finding.serviceError = str(exc)
        finally:
            client.close()
        self.stale_findings.append(finding)
        self.ctx.evidence.event("LogStale", f"the harness log has been quiet for "
                                f"{quiet_s:.0f}s: inspected, not stopped",
                                **finding.model_dump(mode="json", exclude_none=True))
        listed = finding.streamsListed if finding.streamsListed is not None else "?"
        self.ctx.progress(f"harness log quiet for {quiet_s:.0f}s: service "
                          f"{'answers' if finding.serviceModel else 'does not answer'}; "
                          f"{listed} stream(s); left running")

    # --- verdict ---------------------------------------------------------------------------

    def judge(self, outcome: harnessreport.Outcome,
               handles: dict[str, str]) -> tuple[Verdict, str]:
        ctx, bench = self.ctx, self.bench
        accepted = outcome.judge()
        quiet = max((f.logQuietSeconds for f in self.stale_findings), default=0.0)
        stale = ([f"the log was quiet for up to {quiet:g}s, beyond logStaleSeconds "
                  f"{bench.logStaleSeconds} (inspected, left to finish): the run cannot vouch "
                  "for its progress"] if self.stale_findings else [])
        problems = accepted + stale
        scenario_dir = Path(handles["report"]) / bench.scenario
        burst = (harnessreport.file_burst(scenario_dir, outcome.log)
                 if bench.mode == "file_burst" else None)
        tokens = harnessreport.prompt_tokens(scenario_dir)
        document = outcome.document or {}
        ctx.evidence.gate(GATE_HARNESS, not problems, "; ".join(problems) or (
            "exit 0, overall PASS, 0 failed" if bench.mode in harnessreport.JSON_MODES
            else "exit 0, every test case passed"),
            {"exitCode": outcome.exit_code, "summary": document.get("summary"),
             "executionSummary": outcome.compact(), "handles": handles})
        record = BenchDocument(
            scenario=bench.scenario, mode=bench.mode, startPolicy=bench.startPolicy,
            apiMode=bench.apiMode, evs=bench.evs, handles=handles,
            handlesInBundle={k: _in_bundle(ctx.evidence.folder, v) for k, v in handles.items()},
            exitCode=outcome.exit_code, accepted=not problems, problems=problems,
            promptTokens=tokens, fileBurst=burst, staleLog=self.stale_findings,
            maxLiveStreams=(harnessreport.max_live_streams(scenario_dir)
                            if bench.mode == "max_live_streams" else None),
            executionSummary=outcome.compact(), result=outcome.document)
        failed = [f"{GATE_HARNESS}: {'; '.join(problems)}"] if problems else []
        if bench.pairWith:
            record.pairing = self._pairing(tokens)
            if not record.pairing.passed:
                failed.append(f"{GATE_PAIRING}: {record.pairing.reason}")
        ctx.evidence.write(BENCH_FILE, record)
        if burst and burst.firstFailure:
            clean = burst.lastClean.model_dump() if burst.lastClean else None
            ctx.progress(f"file burst: last clean level {clean}, first failure "
                         f"{burst.firstFailure.model_dump()}")
        if not failed:
            return "PASS", f"{bench.scenario}: accepted"
        return ("INCONCLUSIVE" if stale and not accepted and len(failed) == 1 else "FAIL",
                "; ".join(failed))

    def _ignore_eos_problem(self, other_folder: Path) -> str:
        """Both sides of an EVS pair run with ``VLLM_IGNORE_EOS=true`` (as each manifest's
        ``runtime.environment`` read it back from the running service, the image's own
        variables included): with the end-of-sequence honoured, output lengths differ and the
        pair measures something else than EVS."""
        def setting(folder: Path) -> str:
            manifest = read_manifest(Evidence(folder))
            runtime = manifest.runtime if manifest is not None else None
            value = runtime.environment.get("VLLM_IGNORE_EOS") if runtime else None
            return value if value is not None else "unknown"
        mine, theirs = setting(self.ctx.evidence.folder), setting(other_folder)
        if mine.strip().lower() == theirs.strip().lower() == "true":
            return ""
        return (f"VLLM_IGNORE_EOS is {theirs!r} in run {self.bench.pairWith} and {mine!r} in "
                "this run: both sides of an EVS pair run with VLLM_IGNORE_EOS=true (equal "
                "output lengths), or the pair is refused")

    def _pairing(self, tokens: float | None) -> Pairing:
        """The other side's run of the same scenario: EVS must have changed the input tokens
        per chunk."""
        bench = self.bench
        assert bench.pairWith is not None
        other_run = Evidence(self.ctx.evidence.folder.parent / bench.pairWith)
        other_file = other_run.path(BENCH_FILE)
        other = other_run.read(BENCH_FILE, BenchDocument)
        reason = ""
        if other is None:
            reason = f"run {bench.pairWith} has no benchmark evidence ({other_file})"
        elif other.scenario != bench.scenario:
            reason = (f"run {bench.pairWith} ran scenario {other.scenario!r}, not "
                      f"{bench.scenario!r}: runs are paired by scenario")
        elif other.evs == bench.evs:
            reason = f"run {bench.pairWith} is also {'EVS' if bench.evs else 'a baseline'}"
        elif eos := self._ignore_eos_problem(other_file.parents[1]):
            reason = eos
        elif tokens is None or other.promptTokens is None:
            reason = ("input tokens were not reported by both runs (the harness's saved "
                      "answers or chunk_input_tokens_avg)")
        elif tokens == other.promptTokens:
            reason = (f"input tokens per chunk unchanged between the baseline and the EVS run "
                      f"({tokens:g}): misconfiguration, EVS pruned nothing")
        theirs = other.promptTokens if other is not None else None
        said = reason or (f"input tokens per chunk {theirs} (run {bench.pairWith}) vs {tokens} "
                          "(this run)")
        pair = Pairing(passed=not reason, reason=said, other=bench.pairWith,
                       promptTokens=tokens, otherPromptTokens=theirs)
        self.ctx.evidence.gate(GATE_PAIRING, not reason, said, pair.model_dump(mode="json"))
        return pair
