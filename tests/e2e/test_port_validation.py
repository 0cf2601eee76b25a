"""Model-port validation end to end: smoke per modality, quality gates, accuracy, HF_TOKEN.

Real Docker, a fresh emulated service per run, real media decoded by the emulator (ffmpeg).
The emulator's ``RTVI_EMU_ANSWER_MODE`` (set in the template's environment) makes the ported
model answer badly in one way at a time; the canary secret passed as ``HF_TOKEN`` must be gone
from the restarted service and from every file of the evidence.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import Cli
from tests.e2e.daemon_helpers import status_of
from tests.e2e.stream_helpers import rtvi_deployment
from tests.ports import free_port
from tests.specs_factory import write

RESOURCE = "Experiment/port"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def media(path: Path, source: str, frames: int) -> dict[str, Any]:
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    f"color=c={source}:s=64x48:r=5", "-frames:v", str(frames), "-pix_fmt",
                    "yuv420p", "-y", str(path)], check=True, timeout=60)
    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def port_spec(tmp_path: Path, run_id: str, port: int, executor: str = "reconciler"
              ) -> dict[str, Any]:
    """The gates run in the reconciler's process here (the same code as in a job: the job on
    an SSH Host is ``test_host_jobs``'s)."""
    image = {**media(tmp_path / "red.png", "red", 1), "mediaType": "image", "facts": ["red"],
             "absent": ["green"]}
    clip = {**media(tmp_path / "blue.mp4", "blue", 10), "mediaType": "video",
            "facts": ["blue"], "absent": ["yellow"]}
    body = {"integration": {"path": "configuration"},
            "model": {"source": "hf:example/tiny-vlm", "revision": REVISION,
                      "processor": "AutoProcessor", "tokenizer": "tiny-vlm tokenizer",
                      "quantization": "bf16", "contextLength": 8192,
                      "frameSampling": "8 frames per chunk, uniform"},
            "modalities": ["text", "image", "video"], "media": [image, clip],
            "textChecks": [{"prompt": "Say: the sky is blue", "facts": ["sky", "blue"]}],
            "platforms": ["emulated"]}
    return {"apiVersion": "rtvi.reconciler/v1", "kind": "Experiment",
            "metadata": {"name": "port"},
            "spec": {"type": "portValidation", "runId": run_id, "template": "vlm",
                     "service": {"hostPort": port, "env": {"RTVI_EMU_PORT": str(port)}},
                     "measurement": {"claim": "tiny-vlm answers legibly and grounded"},
                     "budgetSeconds": 600, "cleanupSeconds": 20, "portValidation": body,
                     "executor": executor}}


def specs_for(tmp_path: Path, image: str, run_id: str, token_file: Path | None = None,
              **env: str) -> Path:
    template = rtvi_deployment(image, free_port(), **env)
    if token_file is not None:
        template["spec"]["secrets"] = [{"name": "HF_TOKEN", "fromFile": str(token_file)}]
    specs = tmp_path / "specs"
    write(specs, template, port_spec(tmp_path, run_id, free_port()))
    return specs


def evidence_dir(cli: Cli, run_id: str) -> Path:
    return cli.state_dir / "evidence" / run_id


def test_a_port_that_answers_well_passes_every_gate_and_starts_without_hf_token(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    canary = "hf-canary-" + secrets.token_hex(12)
    token = tmp_path / "hf_token"
    token.write_text(canary + "\n")
    specs = specs_for(tmp_path, emulator_image, "port-ok", token)
    planned = cli("plan", str(specs))
    assert f"validate hf:example/tiny-vlm@{REVISION[:19]}" in planned.stdout, planned.stdout
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    record = status_of(cli, RESOURCE)
    assert record is not None, record
    assert record["facts"]["result"] == "PASS", record
    folder = evidence_dir(cli, "port-ok")
    found = json.loads((folder / "evidence" / "port-validation.json").read_text())
    assert found["overall"] == "PASS", found
    assert found["blockers"] == [], found
    assert [r["name"] for r in found["smoke"]] == ["text", "image", "video", "control"]
    assert all(r["passed"] and r["answer"] and r["raw"] for r in found["smoke"]), found["smoke"]
    assert "red" in found["smoke"][1]["answer"].lower()
    assert "blue" in found["smoke"][2]["answer"].lower()
    assert found["accuracy"] == {"correct": 3, "total": 3, "rate": 1.0, "minimum": 1.0}
    hf = json.loads((folder / "gates" / "hf-token-removed.json").read_text())
    assert hf["passed"], hf
    assert hf["evidence"]["restarted"] is True, hf
    assert "HF_TOKEN" not in hf["evidence"]["envNames"]
    report = (folder / "report.md").read_text()
    assert "## Port validation" in report, report
    assert REVISION in report, report
    for file in folder.rglob("*"):  # the token's value reached no file of the evidence
        if file.is_file():
            assert canary.encode() not in file.read_bytes(), file
    assert cli("evidence", "port-ok", "--verify").returncode == 0


def test_ungrounded_answers_fail_naming_the_invented_facts_and_the_next_step(
        cli: Cli, emulator_image: str, tmp_path: Path) -> None:
    specs = specs_for(tmp_path, emulator_image, "port-bad", RTVI_EMU_ANSWER_MODE="ungrounded")
    done = cli("apply", str(specs), "--timeout", "300", timeout=400)
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads((evidence_dir(cli, "port-bad") / "evidence" /
                        "port-validation.json").read_text())
    assert found["overall"] == "FAIL"
    control = found["smoke"][-1]
    assert control["name"] == "control"
    assert not control["passed"]
    assert any("claims what the input does not show: elephant" in p
               for p in control["problems"]), control
    assert found["gates"]["smoke"]["passed"] is False
    assert found["gates"]["hf-token-removed"]["passed"] is True  # nothing to remove: said so
    assert found["blockers"][0].startswith("smoke: ")
    assert found["nextStep"].startswith(
        "fix the first failing smoke row")
