"""``type: benchmark``: one scenario of the external VSS harness, run and supervised.

The order is the benchmark practice's (perf-testing guide, "Running Benchmarks", "Run Integrity
Gates"):

1. ``--list-scenarios`` against the user's config: a misspelt scenario fails here, before any
   service starts (gate ``scenario``).
2. The run's fresh service, and its environment as it runs (the image's own variables
   included): a non-EVS baseline holds no EVS variable, an EVS run holds both that turn EVS on
   (gate ``service-environment``).
3. Runs of 30 minutes or more: the direct 1-frame, 1-token video request first; a hang, a
   timeout, a file asset left in use or unproven cleanup stops the run (gate ``smoke``).
4. The three run handles: CONFIG (the user's config with only the report directory and the
   service URL changed), REPORT (the report directory), LOG (the harness's output). The
   harness runs as a process of its own session on the Host, recorded in the run's inventory
   (``processes``) before it starts, so a crash leaves nothing the recovery cannot end.
5. Supervision: a log whose mtime is older than ``logStaleSeconds`` is *inspected* (service
   health, active streams, the process) and the finding recorded — never killed for it
   (max-stream windows and freshness waits are legitimately quiet); but a run that went quiet
   beyond its window cannot vouch for its progress, so it is not PASS (INCONCLUSIVE when
   nothing else failed).
6. The harness's acceptance (gate ``harness``): exit 0, ``summary.overall_status == PASS``,
   ``summary.failed == 0``, and every repetition's source gates passed. File-burst sweeps keep
   every concurrency level, the last clean level with its p95/p99 and the exact failure text.
7. EVS pairing (gate ``evs-pairing``, with ``pairWith``): the other side's run of the same
   scenario; prompt tokens that did not change between baseline and EVS are a
   misconfiguration (EVS did not prune anything).

The harness's report format (``results.json``, documented in ``tests/harness_standin.py``) is
our reading of the harness: the contracts do not publish it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controllers.errors import ControllerError
from controllers.experiments import benchreport, processes
from controllers.experiments.benchreport import BENCH_FILE
from controllers.experiments.cleanup import asset_counts
from controllers.experiments.driver import GATE_SMOKE, ONE_FRAME_ONE_TOKEN
from controllers.experiments.filechat import PinnedFile, ask
from controllers.experiments.reportparts import Section
from controllers.experiments.runtype import PlannedStep, Result, RunContext
from controllers.experiments.service import RunService
from controllers.waiting import Stopped, until
from specs.experiment import BenchmarkSpec, ExperimentSpec, smokes
from state.evidence import Evidence

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
CONFIG_HANDLE = "output/harness-config.yaml"
REPORT_HANDLE = "output/report"
LOG_HANDLE = "logs/harness.log"


def harness_config_path(bench: BenchmarkSpec) -> Path:
    return Path(bench.harness.workdir) / bench.harness.config


def list_scenarios(bench: BenchmarkSpec) -> tuple[list[str] | None, str]:
    """The scenario names the user's config defines (None and why, when it cannot say)."""
    argv = [*bench.harness.argv, "--config", str(harness_config_path(bench)), "--list-scenarios"]
    try:
        done = subprocess.run(argv, cwd=bench.harness.workdir, capture_output=True, text=True,
                              timeout=LIST_TIMEOUT_S, env=_env(None), check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot run {' '.join(argv)}: {exc}"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return None, f"--list-scenarios exited {done.returncode}: {' | '.join(tail)}"
    names = [line.strip().lstrip("-*").strip() for line in done.stdout.splitlines()]
    return [n for n in names if n and " " not in n], ""


def derived_config(bench: BenchmarkSpec, report_dir: Path, url: str) -> str:
    """The CONFIG handle: the user's config with the report directory and the service URL
    (and, for chat completions, the scenario's ``vlm_api_mode``) set, nothing else."""
    try:
        data = yaml.safe_load(harness_config_path(bench).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise HarnessError(f"cannot read the harness config {harness_config_path(bench)}: "
                           f"{exc}") from None
    if not isinstance(data, dict):
        raise HarnessError(f"the harness config {harness_config_path(bench)} is not a mapping")
    _set(data, bench.harness.outputDirKey, str(report_dir))
    _set(data, bench.harness.serviceUrlKey, url)
    scenarios = data.get("scenarios")
    target = scenarios.get(bench.scenario) if isinstance(scenarios, dict) else None
    (target if isinstance(target, dict) else data)["vlm_api_mode"] = bench.apiMode
    return yaml.safe_dump(data, sort_keys=False)


def _set(data: dict[str, Any], dotted: str, value: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        child = data.get(key)
        if not isinstance(child, dict):
            child = data[key] = {}
        data = child
    data[last] = value


def harness_argv(bench: BenchmarkSpec, config: Path) -> list[str]:
    argv = [*bench.harness.argv, "--config", str(config), "--scenario", bench.scenario]
    if bench.initialStreamCount is not None:
        argv += ["--initial-stream-count", str(bench.initialStreamCount)]
    if bench.addStreamCount is not None:
        argv += ["--add-stream-count", str(bench.addStreamCount)]
    if bench.binarySearchRefinement is not None:
        argv.append("--binary-search-refinement" if bench.binarySearchRefinement
                    else "--no-binary-search-refinement")
    if bench.concurrencyLevels:
        argv += ["--concurrency-levels", ",".join(str(n) for n in bench.concurrencyLevels)]
    return argv


def _env(run_id: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV}
    return env | ({"RTVI_RECONCILER_RUN_ID": run_id} if run_id else {})


class HarnessError(ControllerError):
    """The harness cannot be started as the spec says."""


# --- judging the report ----------------------------------------------------------------------

def acceptance(exit_code: int | None, result: dict[str, Any] | None) -> list[str]:
    """Why the harness's run is not accepted ([]: accepted)."""
    if result is None:
        return [f"exited {exit_code} without a report"]
    problems = [] if exit_code == 0 else [f"exited {exit_code}"]
    raw = result.get("summary")
    summary: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if summary.get("overall_status") != "PASS":
        problems.append(f"summary.overall_status is {summary.get('overall_status')!r}")
    if summary.get("failed") != 0:
        problems.append(f"summary.failed is {summary.get('failed')!r}")
    repetitions = result.get("repetitions")
    if not isinstance(repetitions, list) or not repetitions:
        problems.append("no repetition reported: source gates cannot be checked")
    else:
        for i, rep in enumerate(repetitions):
            gates = rep.get("source_gates") if isinstance(rep, dict) else None
            if not isinstance(gates, dict) or gates.get("passed") is not True:
                problems.append(f"repetition {i + 1}: source gates did not pass ({gates})")
    return problems


def file_burst(result: dict[str, Any]) -> dict[str, Any]:
    """Every concurrency level, the last clean one (p95/p99) and the first failure's text."""
    levels = [lv for lv in result.get("concurrency_levels") or [] if isinstance(lv, dict)]
    clean = None
    failure = None
    for level in sorted(levels, key=lambda lv: lv.get("concurrency", 0)):
        if level.get("status") == "PASS" and failure is None:
            clean = level
        elif level.get("status") != "PASS" and failure is None:
            failure = level
    return {"levels": levels,
            "lastClean": None if clean is None else {
                "concurrency": clean.get("concurrency"), "p95Ms": clean.get("p95_ms"),
                "p99Ms": clean.get("p99_ms")},
            "firstFailure": None if failure is None else {
                "concurrency": failure.get("concurrency"), "error": failure.get("error")}}


def prompt_tokens(result: dict[str, Any] | None) -> int | None:
    if not result:
        return None
    summary = result.get("summary")
    total = summary.get("prompt_tokens") if isinstance(summary, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


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


# --- the type --------------------------------------------------------------------------------

class BenchmarkType:
    """``type: benchmark``: the VSS harness, supervised."""

    name = "benchmark"
    local_only = True

    def declared_gates(self, spec: ExperimentSpec) -> list[str]:
        bench = spec.benchmark
        assert bench is not None
        return [GATE_SCENARIO, GATE_ENVIRONMENT, *([GATE_SMOKE] if smokes(spec) else []),
                GATE_HARNESS, *([GATE_PAIRING] if bench.pairWith else [])]

    def planned(self, spec: ExperimentSpec) -> list[PlannedStep]:
        bench = spec.benchmark
        assert bench is not None
        side = "EVS" if bench.evs else "non-EVS baseline"
        paired = f", paired with run {bench.pairWith}" if bench.pairWith else ""
        return [PlannedStep("run", f"harness scenario {bench.scenario}",
                            f"{bench.mode}, {bench.startPolicy} start, {bench.apiMode}, {side}"
                            f"{paired}: {' '.join(bench.harness.argv)} in "
                            f"{bench.harness.workdir}")]

    def execute(self, ctx: RunContext) -> tuple[Result, str]:
        bench = ctx.spec.benchmark
        assert bench is not None
        return Benchmark(ctx, bench).run()

    def report(self, evidence: Evidence, manifest: dict[str, Any]) -> Section:
        return benchreport.section(evidence)


@dataclass
class Benchmark:
    ctx: RunContext
    bench: BenchmarkSpec
    stale_findings: list[dict[str, Any]] = field(default_factory=list)

    def run(self) -> tuple[Result, str]:
        ctx, bench = self.ctx, self.bench
        ctx.progress(f"checking scenario {bench.scenario} with --list-scenarios")
        names, why = list_scenarios(bench)
        listed = names is not None and bench.scenario in names
        reason = (f"{bench.scenario} is defined" if listed else why or
                  f"{bench.scenario} is not in the config's scenarios: "
                  f"{', '.join(names or []) or 'none listed'}")
        ctx.evidence.gate(GATE_SCENARIO, listed, reason, {"listed": names, "why": why,
                                                          "config": str(
                                                              harness_config_path(bench))})
        if not listed:
            return "FAIL", f"{GATE_SCENARIO}: {reason}"
        service = ctx.start_service()
        env_names = ctx.env_names(service)
        problems = environment_problems(env_names, bench.evs)
        ctx.evidence.gate(GATE_ENVIRONMENT, not problems, "; ".join(problems) or (
            f"{'EVS on' if bench.evs else 'no EVS variable'} in the running service"),
            {"envNames": env_names, "evs": bench.evs})
        if problems:
            return "FAIL", f"{GATE_ENVIRONMENT}: {'; '.join(problems)}"
        if smokes(ctx.spec):
            smoke_problems = self._smoke(service)
            if smoke_problems:
                return "FAIL", f"{GATE_SMOKE}: {'; '.join(smoke_problems)}"
        exit_code, result, handles = self._harness(service)
        return self._judge(exit_code, result, handles)

    # --- smoke -----------------------------------------------------------------------------

    def _smoke(self, service: RunService) -> list[str]:
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
                files = asset_counts(client.asset_stats())["file(s)"]
                if files != 0:
                    problems.append(f"asset stats report {files} file(s) after the smoke"
                                    if files is not None else "asset stats do not report "
                                    "files: zero is not proven")
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

    def _harness(self, service: RunService) -> tuple[int | None, dict[str, Any] | None,
                                                      dict[str, str]]:
        ctx, bench = self.ctx, self.bench
        evidence = ctx.evidence
        report_dir = evidence.path(REPORT_HANDLE)
        report_dir.mkdir(parents=True, exist_ok=True)
        config = evidence.write_text(CONFIG_HANDLE, derived_config(bench, report_dir,
                                                                   service.url))
        log_path = evidence.path(LOG_HANDLE)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        handles = {"config": str(config), "report": str(report_dir), "log": str(log_path)}
        argv = harness_argv(bench, config)
        evidence.event("HarnessLaunching", "the three run handles", **handles, argv=argv)
        ctx.progress(f"harness: CONFIG {config}, REPORT {report_dir}, LOG {log_path}")
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(argv, cwd=bench.harness.workdir, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=_env(ctx.spec.runId), start_new_session=True)
            except OSError as exc:
                raise HarnessError(f"cannot start the harness {argv[0]}: {exc}") from None
        name = processes.name_of(proc)
        ctx.note_process(name)  # before anything can go wrong: the recovery ends it
        evidence.event("HarnessStarted", f"{name}", process=name)
        try:
            exit_code = self._supervise(proc, log_path, service)
        finally:
            if proc.poll() is None and processes.end(name) is None:
                proc.wait(timeout=5)  # ended (stopped, over budget): reap it
        result_file = report_dir / bench.harness.resultFile
        try:
            result = json.loads(result_file.read_text("utf-8"))
        except (OSError, ValueError):
            result = None
        return exit_code, result if isinstance(result, dict) else None, handles

    def _supervise(self, proc: subprocess.Popen[bytes], log: Path, service: RunService) -> int:
        """Wait for the harness to end (the run's budget and shutdown stop it); a stale log is
        inspected and recorded, once per stale period, never a reason to kill."""
        stale_s = float(self.bench.logStaleSeconds)
        last_inspected = [0.0]

        def check() -> int | None:
            code = proc.poll()
            if code is not None:
                return code
            quiet = time.time() - log.stat().st_mtime
            if quiet >= stale_s and time.monotonic() - last_inspected[0] >= stale_s:
                last_inspected[0] = time.monotonic()
                self._inspect(quiet, service, proc)
            return None
        code = until(check, timeout_s=float(self.ctx.spec.budgetSeconds), pace=POLL_S,
                     stop=self.ctx.stop)
        if code is None:
            raise Stopped("the harness outlived the run's budget")
        return code

    def _inspect(self, quiet_s: float, service: RunService,
                 proc: subprocess.Popen[bytes]) -> None:
        finding: dict[str, Any] = {"logQuietSeconds": round(quiet_s, 1),
                                   "harnessRunning": proc.poll() is None}
        client = service.client()
        try:
            finding["serviceModel"] = client.model_id()
            finding["streamsListed"] = len(client.list_streams())
        except ControllerError as exc:
            finding["serviceError"] = str(exc)
        finally:
            client.close()
        self.stale_findings.append(finding)
        self.ctx.evidence.event("LogStale", f"the harness log has been quiet for "
                                f"{quiet_s:.0f}s: inspected, not stopped", **finding)
        self.ctx.progress(f"harness log quiet for {quiet_s:.0f}s: service "
                          f"{'answers' if 'serviceModel' in finding else 'does not answer'}; "
                          f"{finding.get('streamsListed', '?')} stream(s); left running")

    # --- verdict ---------------------------------------------------------------------------

    def _judge(self, exit_code: int | None, result: dict[str, Any] | None,
               handles: dict[str, str]) -> tuple[Result, str]:
        ctx, bench = self.ctx, self.bench
        accepted = acceptance(exit_code, result)
        quiet = max((f["logQuietSeconds"] for f in self.stale_findings), default=0.0)
        stale = ([f"the log was quiet for up to {quiet:g}s, beyond logStaleSeconds "
                  f"{bench.logStaleSeconds} (inspected, left to finish): the run cannot vouch "
                  "for its progress"] if self.stale_findings else [])
        problems = accepted + stale
        burst = file_burst(result) if result and bench.mode == "file-burst" else None
        tokens = prompt_tokens(result)
        ctx.evidence.gate(GATE_HARNESS, not problems, "; ".join(problems) or (
            "exit 0, overall PASS, 0 failed, every repetition's source gates passed"),
            {"exitCode": exit_code, "summary": (result or {}).get("summary"),
             "handles": handles})
        record: dict[str, Any] = {
            "scenario": bench.scenario, "mode": bench.mode, "startPolicy": bench.startPolicy,
            "apiMode": bench.apiMode, "evs": bench.evs, "handles": handles,
            "exitCode": exit_code, "accepted": not problems, "problems": problems,
            "promptTokens": tokens, "fileBurst": burst, "staleLog": self.stale_findings,
            "result": result}
        failed = [f"{GATE_HARNESS}: {'; '.join(problems)}"] if problems else []
        if bench.pairWith:
            pair = self._pairing(tokens)
            record["pairing"] = pair
            if not pair["passed"]:
                failed.append(f"{GATE_PAIRING}: {pair['reason']}")
        ctx.evidence.write_json(BENCH_FILE, record)
        if burst and burst["firstFailure"]:
            ctx.progress(f"file burst: last clean level {burst['lastClean']}, first failure "
                         f"{burst['firstFailure']}")
        if not failed:
            return "PASS", f"{bench.scenario}: accepted"
        return ("INCONCLUSIVE" if stale and not accepted and len(failed) == 1 else "FAIL",
                "; ".join(failed))

    def _pairing(self, tokens: int | None) -> dict[str, Any]:
        """The other side's run of the same scenario: EVS must have changed prompt tokens."""
        bench = self.bench
        assert bench.pairWith is not None
        other_file = self.ctx.evidence.folder.parent / bench.pairWith / BENCH_FILE
        try:
            other = json.loads(other_file.read_text("utf-8"))
        except (OSError, ValueError):
            other = None
        reason = ""
        if not isinstance(other, dict):
            reason = f"run {bench.pairWith} has no benchmark evidence ({other_file})"
        elif other.get("scenario") != bench.scenario:
            reason = (f"run {bench.pairWith} ran scenario {other.get('scenario')!r}, not "
                      f"{bench.scenario!r}: runs are paired by scenario")
        elif other.get("evs") == bench.evs:
            reason = f"run {bench.pairWith} is also {'EVS' if bench.evs else 'a baseline'}"
        elif tokens is None or other.get("promptTokens") is None:
            reason = "prompt tokens were not reported by both runs"
        elif tokens == other.get("promptTokens"):
            reason = (f"prompt tokens unchanged between the baseline and the EVS run "
                      f"({tokens}): misconfiguration, EVS pruned nothing")
        said = reason or (
            f"prompt tokens {other.get('promptTokens') if isinstance(other, dict) else '?'} "
            f"(run {bench.pairWith}) vs {tokens} (this run)")
        evidence = {"passed": not reason, "reason": said, "other": bench.pairWith,
            "promptTokens": tokens,
            "otherPromptTokens": other.get("promptTokens") if isinstance(other, dict) else None}
        self.ctx.evidence.gate(GATE_PAIRING, not reason, said, evidence)
        return evidence
