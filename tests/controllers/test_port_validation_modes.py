"""Port validation end to end against the RTVI emulator served in-process, once per answer
mode: the sane service passes every gate with evidence; each bad mode fails the gate that
catches it, quoting the answer. (The Docker run of the same flow, with media and the HF_TOKEN
restart, is tests/e2e/test_port_validation.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from controllers.kinds.experiments.harnessproc import LocalLauncher
from controllers.kinds.experiments.portvalidation.runtype import PortValidationType
from controllers.kinds.experiments.runtype import RunContext
from controllers.kinds.experiments.service import RunService
from emulators.rtvi.config import ANSWER_MODES
from specs.experiments.portvalidation import PortValidationExperimentSpec
from state.evidence import Evidence
from tests.inproc_rtvi import inproc_rtvi

SPEC = {"type": "portValidation", "runId": "port-1", "template": "vlm",
        "service": {"hostPort": 18300}, "measurement": {"claim": "legible and grounded"},
        "portValidation": {
            "integration": {"path": "adapter"},
            "model": {"source": "hf:org/m", "revision": "ab" * 20, "processor": "p",
                      "tokenizer": "t", "quantization": "fp8", "contextLength": 8192,
                      "frameSampling": "8 per chunk"},
            "modalities": ["text"],
            "textChecks": [{"prompt": "Say: the river is green", "facts": ["river", "green"]}]}}


@contextmanager
def validation(tmp_path: Path, mode: str
               ) -> Iterator[tuple[RunContext[PortValidationExperimentSpec], Evidence]]:
    with inproc_rtvi(RTVI_EMU_ANSWER_MODE=mode) as rtvi:
        service = RunService("c1", "port-1", rtvi.url, rtvi.url, "model-1", None)
        evidence = Evidence.create(tmp_path, "port-1")
        yield RunContext(
            spec=PortValidationExperimentSpec.model_validate(SPEC), evidence=evidence,
            stop=threading.Event(), progress=lambda _m: None,
            launch=lambda _without: service, retire_service=lambda _s, _n: None,
            publish=lambda _s, _p: {}, note_streams=lambda _ids: None,
            stream_id=lambda part, src: f"{part}/{src}", env_names=lambda _s: ["PATH"],
            launcher=LocalLauncher(note=lambda _n: None),
            gpu_back=lambda _s: ("not measured (the run uses no GPU)", [])), evidence


def test_a_sane_service_passes_every_gate_with_evidence(tmp_path: Path) -> None:
    with validation(tmp_path, "normal") as (ctx, evidence):
        result, reason = PortValidationType().execute(ctx)
    assert result == "PASS", reason
    gates = evidence.gates()
    assert set(gates) == set(PortValidationType().declared_gates(ctx.spec))
    assert all(g.passed for g in gates.values()), gates


@pytest.mark.parametrize("mode", [m for m in ANSWER_MODES if m != "normal"])
def test_each_bad_answer_mode_fails_the_smoke_gate_quoting_the_answer(tmp_path: Path,
                                                                      mode: str) -> None:
    with validation(tmp_path, mode) as (ctx, evidence):
        result, reason = PortValidationType().execute(ctx)
    assert result == "FAIL", reason
    assert reason.startswith("smoke: "), reason
    smoke = evidence.gates()["smoke"]
    assert not smoke.passed, smoke.reason
    assert "(answer: '" in smoke.reason, smoke.reason
    assert not evidence.gates()["accuracy"].passed  # the labelled item fails alike
