"""``type: portValidation``: the BYOM report, from requests to the run's own fresh service.

What is judged (``rules.md``, portValidation; the BYOM porting guide's validation and
completion contract), each a gate whose PASS needs non-empty evidence:

- ``model-contract``: source and immutable revision, processor, tokenizer, quantization,
  context length, frame sampling and kernels recorded (the spec refuses a moving revision).
- ``integration-path``: configuration, adapter, plugin or patch (a patch with its reason).
- ``smoke``: one row per claimed modality through ``/v1/chat/completions`` — text; an image
  uploaded with an explicit ``media_type=image``; a clip with ``media_type=video`` and the
  declared sampling — plus a control row that must not invent what its input does not show.
  Every answer passes the quality gates (``quality``) or its row fails; raw answers are kept.
- ``accuracy``: the labelled set (media and text checks), at least ``minAccuracy`` correct.
- ``hf-token-removed``: when the template passes ``HF_TOKEN``, the service is started again
  without it and must serve and answer; in every case the running service's environment (the
  image's own variables included) must not hold it.

The overall verdict is PASS only when every gate and every smoke row passes; otherwise the
report names the blockers and the next bounded step. ``evidence/port-validation.json`` holds
it all; ``report.md`` renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controllers.errors import ControllerError
from controllers.kinds.experiments.filechat import PinnedFile, ask
from controllers.kinds.experiments.ledger import percentile
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.portvalidation import quality
from controllers.kinds.experiments.portvalidation import report as portreport
from controllers.kinds.experiments.portvalidation.report import (
    PORT_FILE,
    AccuracySummary,
    GateVerdict,
    PortDocument,
    RequestPerformance,
    Row,
)
from controllers.kinds.experiments.reportparts import Section
from controllers.kinds.experiments.runtype import PlannedStep, RunContext, StartsWhenLaunched
from controllers.kinds.experiments.service import RunService
from specs.experiments.portvalidation import (
    CONTROL_ABSENT,
    PortMedia,
    PortValidationExperimentSpec,
    PortValidationSpec,
)
from state.evidence import Evidence, Verdict

GATE_CONTRACT = "model-contract"
GATE_PATH = "integration-path"
GATE_SMOKE_ROWS = "smoke"
GATE_ACCURACY = "accuracy"
GATE_HF_TOKEN = "hf-token-removed"
HF_TOKEN = "HF_TOKEN"
TEXT_PROMPT = "Reply with exactly these three words: green apple river."
TEXT_FACTS = ["green", "apple", "river"]
MEDIA_PROMPT = "What does this show? Answer in one short sentence."
SAMPLE_CHARS = 80  # of a failed answer, quoted in its gate's reason
NEXT_STEP = {
    GATE_CONTRACT: "record the missing model-contract fields and rerun",
    GATE_PATH: "record the integration path (and a patch's reason) and rerun",
    GATE_SMOKE_ROWS: "fix the first failing smoke row (its raw answer is in the evidence), "
                     "then rerun the smoke rows",
    GATE_ACCURACY: "inspect the wrong answers of the labelled set, fix the processor, "
                   "tokenizer or sampling, then rerun the accuracy set",
    GATE_HF_TOKEN: "populate the model cache without baking HF_TOKEN into the image or the "
                   "template, then rerun",
}


class PortValidationType(StartsWhenLaunched):
    """``type: portValidation``: the BYOM report."""

    name = "portValidation"

    def local_only(self, spec: PortValidationExperimentSpec) -> bool:
        return False

    def declared_gates(self, spec: PortValidationExperimentSpec) -> list[str]:
        return [GATE_CONTRACT, GATE_PATH, GATE_SMOKE_ROWS, GATE_ACCURACY, GATE_HF_TOKEN]

    def planned(self, spec: PortValidationExperimentSpec) -> list[PlannedStep]:
        port = spec.portValidation
        items = len(port.media) + len(port.textChecks)
        return [PlannedStep("validate", f"{port.model.source}@{port.model.revision[:19]}",
                            f"{port.integration.path} path; smoke "
                            f"{', '.join(port.modalities)} + control; accuracy over {items} "
                            f"labelled item(s) (minimum {port.minAccuracy:.0%})")]

    def execute(self, ctx: RunContext[PortValidationExperimentSpec]) -> tuple[Verdict, str]:
        return PortValidation(ctx, ctx.spec.portValidation).run()

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        return portreport.section(evidence, manifest)


@dataclass
class PortValidation:
    ctx: RunContext[PortValidationExperimentSpec]
    port: PortValidationSpec
    rows: list[Row] = field(default_factory=list)
    accuracy: list[Row] = field(default_factory=list)

    def run(self) -> tuple[Verdict, str]:
        ctx, port = self.ctx, self.port
        service = ctx.start_service()
        gates = {GATE_CONTRACT: self._contract(), GATE_PATH: self._path()}
        ctx.progress(f"smoke: {', '.join(port.modalities)} and a control prompt")
        self.rows = self._smoke(service)
        gates[GATE_SMOKE_ROWS] = self._gate(GATE_SMOKE_ROWS, self.rows)
        ctx.progress(f"accuracy: {len(port.media) + len(port.textChecks)} labelled item(s)")
        self.accuracy = self._accuracy(service)
        correct = sum(r.passed for r in self.accuracy)
        rate = correct / len(self.accuracy) if self.accuracy else 0.0
        gates[GATE_ACCURACY] = self._record(GATE_ACCURACY, bool(self.accuracy)
                                            and rate >= port.minAccuracy,
                                            f"{correct}/{len(self.accuracy)} correct "
                                            f"({rate:.0%}; minimum {port.minAccuracy:.0%})",
                                            {"items": [r.model_dump(mode="json")
                                                       for r in self.accuracy]})
        gates[GATE_HF_TOKEN] = self._hf_token(service)
        blockers = [f"{n}: {why}" for n, (ok, why) in gates.items() if not ok]
        failed_rows = [r.name for r in self.rows if not r.passed]
        overall = not blockers and not failed_rows
        first = next((n for n, (ok, _) in gates.items() if not ok), None)
        next_step = "none: every gate and smoke row passed" if overall else NEXT_STEP[
            first or GATE_SMOKE_ROWS]
        ctx.evidence.write(PORT_FILE, PortDocument(
            overall="PASS" if overall else "FAIL", model=port.model,
            integration=port.integration, modalities=list(port.modalities),
            platforms=port.platforms,
            gates={n: GateVerdict(passed=ok, reason=why) for n, (ok, why) in gates.items()},
            smoke=self.rows,
            accuracy=AccuracySummary(correct=correct, total=len(self.accuracy), rate=rate,
                                     minimum=port.minAccuracy),
            performance=_performance([*self.rows, *self.accuracy]),
            blockers=blockers, nextStep=next_step))
        if overall:
            return "PASS", (f"every gate and smoke row passed; accuracy {correct}/"
                            f"{len(self.accuracy)}")
        return "FAIL", "; ".join(blockers) or "smoke row(s) failed: " + ", ".join(failed_rows)

    # --- gates -----------------------------------------------------------------------------

    def _record(self, gate: str, passed: bool, reason: str,
                evidence: dict[str, Any]) -> tuple[bool, str]:
        self.ctx.evidence.gate(gate, passed, reason, evidence)
        return passed, reason

    def _contract(self) -> tuple[bool, str]:
        model = self.port.model.model_dump(mode="json")
        empty = [k for k, v in model.items() if v in ("", None) and k != "kernels"]
        return self._record(GATE_CONTRACT, not empty, "recorded: " + ", ".join(
            sorted(model)) if not empty else f"missing: {', '.join(empty)}", {"model": model})

    def _path(self) -> tuple[bool, str]:
        path = self.port.integration
        ok = path.path != "patch" or bool(path.reason)
        why = f"{path.path}" + (f" ({path.reason})" if path.reason else "")
        return self._record(GATE_PATH, ok, why if ok else "a patch without its reason",
                            {"integration": path.model_dump(mode="json")})

    def _gate(self, gate: str, rows: list[Row]) -> tuple[bool, str]:
        failed = [f"{r.name}: {'; '.join(r.problems)}" for r in rows if not r.passed]
        reason = ("; ".join(failed) if failed else
                  f"{len(rows)} row(s) passed: {', '.join(r.name for r in rows)}")
        return self._record(gate, bool(rows) and not failed, reason,
                            {"rows": [r.model_dump(mode="json") for r in rows]})

    def _hf_token(self, service: RunService) -> tuple[bool, str]:
        """``HF_TOKEN`` is for populating the cache only: the model must start without it."""
        template = self.ctx.spec.template
        names = self.ctx.env_names(service) or []
        used = HF_TOKEN in names
        if not used:
            return self._record(GATE_HF_TOKEN, True, f"the service runs without {HF_TOKEN} "
                                "(neither the template nor the image sets it)",
                                {"envNames": names, "restarted": False})
        self.ctx.progress(f"restarting the service without {HF_TOKEN}")
        self.ctx.retire_service(service, "with-hf-token")
        try:
            again = self.ctx.start_service(frozenset({HF_TOKEN}))
        except ControllerError as exc:
            return self._record(GATE_HF_TOKEN, False, f"the service did not start without "
                                f"{HF_TOKEN}: {exc}", {"restarted": True, "error": str(exc)})
        after = self.ctx.env_names(again) or []
        row = self._ask(again, Row(name="text-without-hf-token", modality="text",
                                   prompt=TEXT_PROMPT, facts=TEXT_FACTS))
        problems = ([f"{HF_TOKEN} is still set (baked into image of Deployment {template})"]
                    if HF_TOKEN in after else []) + row.problems
        return self._record(GATE_HF_TOKEN, not problems, "; ".join(problems) or (
            f"started and answered without {HF_TOKEN}"),
            {"restarted": True, "envNames": after, "row": row.model_dump(mode="json")})

    # --- requests --------------------------------------------------------------------------

    def _smoke(self, service: RunService) -> list[Row]:
        port = self.port
        rows = []
        for modality in port.modalities:
            if modality == "text":
                rows.append(self._ask(service, Row(name="text", modality="text",
                                                   prompt=TEXT_PROMPT, facts=TEXT_FACTS)))
                continue
            media = next(m for m in port.media if m.mediaType == modality)
            rows.append(self._ask(service, _media_row(modality, media), media))
        control_media = port.media[0] if port.media else None
        absent = [*CONTROL_ABSENT, *(control_media.absent if control_media else [])]
        prompt = (f"Is there an {absent[0]} in this input? Describe only what is shown."
                  if control_media else "Do not name any animal or vehicle. Reply with the "
                  "single word: understood.")
        facts = list(control_media.facts) if control_media else ["understood"]
        modality = control_media.mediaType if control_media else "text"
        rows.append(self._ask(service, Row(name="control", modality=modality, prompt=prompt,
                                           facts=facts, absent=absent), control_media))
        return rows

    def _accuracy(self, service: RunService) -> list[Row]:
        port = self.port
        rows = [self._ask(service, _media_row(f"{m.mediaType}-{i + 1}", m), m)
                for i, m in enumerate(port.media)]
        rows += [self._ask(service, Row(name=f"text-{i + 1}", modality="text",
                                        prompt=c.prompt, facts=list(c.facts),
                                        absent=list(c.absent)))
                 for i, c in enumerate(port.textChecks)]
        return rows

    def _ask(self, service: RunService, row: Row, media: PortMedia | None = None) -> Row:
        """One chat request (with its media uploaded first and deleted after); the row's
        problems: the request's failure, the quality gates, a file left in use."""
        body: dict[str, Any] = {
            "model": service.model_id, "max_tokens": self.port.maxTokens,
            "messages": [{"role": "user", "content": row.prompt}]}
        if media is not None and media.mediaType == "video":
            body["num_frames_per_second_or_fixed_frames_chunk"] = (
                self.port.videoSampling.framesPerChunk)
            body["use_fps_for_chunking"] = self.port.videoSampling.useFps
        pinned = (PinnedFile(media.path, media.sha256, media.mediaType) if media is not None
                  else None)
        client = service.client()
        try:
            asked = ask(client, body, self.port.requestTimeoutSeconds, pinned)
        finally:
            client.close()
        answer = asked.answer
        if answer is not None:
            row.latency_ms = round((asked.seconds or 0.0) * 1000, 3)
            row.answer, row.finish_reason, row.raw = (answer.content, answer.finish_reason,
                                                      answer.raw)
            usage = answer.raw.get("usage")
            tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
            row.completion_tokens = tokens if isinstance(tokens, int) else None
            found = quality.judge(answer.content, answer.finish_reason, row.facts, row.absent)
            sample = ascii(answer.content[:SAMPLE_CHARS])  # escaped: invalid Unicode too
            row.problems += [f"{f.gate}: {f.problem} (answer: {sample})" for f in found]
        row.problems += asked.problems
        return row


def _media_row(name: str, media: PortMedia) -> Row:
    return Row(name=name, modality=media.mediaType, prompt=MEDIA_PROMPT,
               facts=list(media.facts), absent=list(media.absent))




def _performance(rows: list[Row]) -> RequestPerformance:
    """Latency and throughput of the validation's own requests (one at a time: a sanity
    figure, not a benchmark)."""
    timed = [r for r in rows if r.latency_ms is not None]
    if not timed:
        return RequestPerformance()
    latencies = sorted(r.latency_ms for r in timed if r.latency_ms is not None)
    tokens = sum(r.completion_tokens or 0 for r in timed)
    seconds = sum(latencies) / 1000
    return RequestPerformance(requests=len(timed), latencyMsMedian=percentile(latencies, 50),
                              latencyMsMax=latencies[-1],
                              completionTokensPerSecond=round(tokens / seconds, 3)
                              if seconds else None)
