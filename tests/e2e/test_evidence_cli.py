"""`reconciler evidence RUN [--verify]`: the run's result and gates, and whether it is intact."""

from __future__ import annotations

import json

from state.evidence import Evidence
from tests.conftest import Cli


def _bundle(cli: Cli) -> Evidence:
    ev = Evidence.create(cli.state_dir / "evidence", "canary-001")
    ev.write_json("manifest.json", {"runId": "canary-001"})
    ev.gate("isolation", True, "3 source-correct answers from each of 4 sources",
            {"answers": {"red": ["RED"] * 3}})
    ev.gate("cleanup", True, "0 containers, 0 streams", {"containers": 0, "streams": 0})
    ev.finish("PASS", ["isolation", "cleanup"], "every gate passed")
    ev.seal()
    return ev


def test_summary_and_verify_of_an_intact_run(cli: Cli) -> None:
    _bundle(cli)
    shown = cli("evidence", "canary-001", "--verify")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "result: PASS" in shown.stdout
    assert "isolation" in shown.stdout
    assert "verified: every file matches checksums.sha256" in shown.stdout
    data = json.loads(cli("evidence", "canary-001", "--verify", "-o", "json").stdout)
    assert data["result"] == "PASS"
    assert data["verified"] is True
    assert [g["gate"] for g in data["gates"]] == ["cleanup", "isolation"]


def test_one_changed_byte_fails_verify_naming_the_file(cli: Cli) -> None:
    ev = _bundle(cli)
    gate = ev.folder / "gates" / "isolation.json"
    gate.write_bytes(gate.read_bytes().replace(b"RED", b"REX", 1))
    shown = cli("evidence", "canary-001", "--verify")
    assert shown.returncode == 1
    assert f"{gate}: changed (sha256 differs from checksums.sha256)" in shown.stderr


def test_an_unknown_run_is_a_clear_error(cli: Cli) -> None:
    shown = cli("evidence", "no-such-run")
    assert shown.returncode == 1
    assert "no evidence for run no-such-run under" in shown.stderr
    assert "Traceback" not in (
        shown.stderr)
