"""An experiment's evidence folder: single-use run IDs, no secrets, no unbacked PASS, verifiable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from state.evidence import CHECKSUMS, Document, Evidence, EvidenceError, verify
from state.redaction import Redactor


def _sealed(tmp_path: Path, redactor: Redactor | None = None) -> Evidence:
    ev = Evidence.create(tmp_path / "evidence", "run-001", redactor or Redactor())
    ev.status("Running", "Active")
    ev.event("Launched", "service created")
    ev.write_json("manifest.json", {"image": "rtvi@sha256:" + "ab" * 32})
    ev.gate("isolation", True, "3 correct answers from each of 4 sources",
            {"answers": {"red": ["The frame shows solid RED."] * 3}})
    ev.write_text("logs/service.log", "INFO ready\n")
    assert ev.finish("PASS", ["isolation"], "all gates passed") == "PASS"
    ev.seal()
    return ev


def test_a_sealed_bundle_verifies(tmp_path: Path) -> None:
    ev = _sealed(tmp_path)
    assert verify(ev.folder) == []
    status = json.loads((ev.folder / "status.json").read_text())
    assert status["result"] == "PASS"
    assert status["phase"] == "Done"
    listed = (ev.folder / CHECKSUMS).read_text().splitlines()
    assert [line.split("  ")[1] for line in listed] == [
        "events.jsonl", "gates/isolation.json", "logs/service.log", "manifest.json",
        "status.json"]


@pytest.mark.parametrize("victim", ["events.jsonl", "gates/isolation.json", "logs/service.log",
                                    "manifest.json", "status.json"])
def test_one_changed_byte_anywhere_is_named(tmp_path: Path, victim: str) -> None:
    ev = _sealed(tmp_path)
    path = ev.folder / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert verify(ev.folder) == [f"{path}: changed (sha256 differs from {CHECKSUMS})"]


def test_missing_added_and_linked_files_are_named(tmp_path: Path) -> None:
    ev = _sealed(tmp_path)
    (ev.folder / "manifest.json").unlink()
    (ev.folder / "extra.txt").write_text("added later")
    os.symlink("/etc/hostname", ev.folder / "link")
    problems = verify(ev.folder)
    assert f"{ev.folder / 'manifest.json'}: listed but missing" in problems
    assert f"{ev.folder / 'extra.txt'}: not in {CHECKSUMS} (added after sealing)" in problems
    assert f"{ev.folder / 'link'}: not a regular file (a link, pipe or device is not evidence)" \
        in problems
    (ev.folder / CHECKSUMS).write_text("garbage\n")
    assert verify(ev.folder)[0].endswith(":1: not a 'sha256  path' line")


def test_a_gate_passes_only_as_json_true(tmp_path: Path) -> None:
    """A hand-edited (or foreign) gate file saying "true" or 1 backs no PASS."""
    ev = Evidence.create(tmp_path, "run-gate")
    for name, passed in (("isolation", "true"), ("cleanup", 1)):
        ev.write_json(f"gates/{name}.json", {"gate": name, "passed": passed, "reason": None,
                                             "evidence": {"k": 1}})
    ev.write_json("gates/frames.json", {"passed": True, "reason": None, "evidence": {"k": 1}})
    assert {n: g.passed for n, g in ev.gates().items()} == {"frames": True}
    assert ev.finish("PASS", ["isolation", "cleanup", "frames"], "done") == "FAIL"


def test_a_run_id_is_used_once(tmp_path: Path) -> None:
    Evidence.create(tmp_path, "run-001")
    with pytest.raises(EvidenceError, match="run ID run-001 was used before"):
        Evidence.create(tmp_path, "run-001")


def test_pass_needs_every_declared_gate_passed_with_evidence(tmp_path: Path) -> None:
    ev = Evidence.create(tmp_path, "run-002")
    ev.gate("isolation", True, "ok", {"answers": {"red": ["red"]}})
    ev.gate("performance", False, "p95 3.1 s over 2 s", {"p95_ms": 3100})
    ev.gate("cleanup", True, "claimed", {})  # no evidence: not a recorded gate
    result = ev.finish("PASS", ["isolation", "performance", "cleanup", "frames"], "done")
    assert result == "FAIL"
    status = json.loads((ev.folder / "status.json").read_text())
    assert status["result"] == "FAIL"
    assert status["reason"] == ("refused PASS: gate cleanup has no evidence; gate frames has no "
                                "evidence; gate performance did not pass")


def test_no_secret_reaches_the_folder(tmp_path: Path) -> None:
    redactor = Redactor()
    canary = "canary-secret-5f3a9c"
    redactor.register(canary)
    ev = Evidence.create(tmp_path, "run-003", redactor)
    ev.write_json("manifest.json", {"env": {"TOKEN": canary}, "note": f"token={canary}"})
    ev.write_text("logs/service.log", f"using {canary}\n")
    ev.event("Launched", f"with {canary}", detail={"k": canary})
    ev.gate("isolation", True, f"r {canary}", {"raw": [canary]})
    ev.status("Running", "Active", reason=canary)
    ev.seal()
    for path in ev.folder.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("name", ["../escape.json", "/etc/passwd", "a/../../b", ""])
def test_files_stay_inside_the_folder(tmp_path: Path, name: str) -> None:
    ev = Evidence.create(tmp_path, "run-004")
    with pytest.raises(EvidenceError):
        ev.write_text(name, "x")


def test_a_pipe_in_the_folder_is_named_not_read(tmp_path: Path) -> None:
    ev = _sealed(tmp_path)
    os.mkfifo(ev.folder / "logs" / "pipe")  # reading it would block forever
    assert verify(ev.folder) == [f"{ev.folder / 'logs' / 'pipe'}: not a regular file (a link, "
                                 "pipe or device is not evidence)"]


def test_pass_with_no_declared_gate_is_refused(tmp_path: Path) -> None:
    ev = Evidence.create(tmp_path, "run-005")
    assert ev.finish("PASS", [], "nothing checked") == "FAIL"
    status = json.loads((ev.folder / "status.json").read_text())
    assert status["reason"] == "refused PASS: no gate declared"


@pytest.mark.parametrize("run_id", ["../x", "/abs", "a/b", "..", "ab", "-x1", "Run1"])
def test_run_ids_are_plain_folder_names(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(EvidenceError, match="is not a run ID"):
        Evidence.create(tmp_path / "root", run_id)
    with pytest.raises(EvidenceError, match="is not a run ID"):
        Evidence.open(tmp_path / "root", run_id)
    assert not (tmp_path / "x").exists()
    assert not (tmp_path / "root").exists()


def test_the_spec_and_the_folder_agree_on_run_ids() -> None:
    from specs.experiments.base import RUN_ID_PATTERN
    from state.evidence import RUN_ID_RE
    assert RUN_ID_RE.pattern == RUN_ID_PATTERN


class _Doc(Document):
    name: str
    count: int = 0


def test_a_document_is_read_back_by_the_model_that_wrote_it_and_a_gap_is_none(
        tmp_path: Path) -> None:
    ev = Evidence.create(tmp_path, "run-doc")
    written = _Doc(name="answer \udcff quoted", count=3)  # a service's invalid Unicode
    ev.write("evidence/doc.json", written)
    assert ev.read("evidence/doc.json", _Doc) == written
    ev.write_json("evidence/newer.json", {"name": "n", "count": 1, "addedLater": True})
    assert ev.read("evidence/newer.json", _Doc) == _Doc(name="n", count=1)  # lenient
    ev.write_json("evidence/other.json", {"count": "many"})
    assert ev.read("evidence/other.json", _Doc) is None  # another shape: a gap
    ev.path("evidence/broken.json").write_text("{not json")
    assert ev.read("evidence/broken.json", _Doc) is None
    assert ev.read("evidence/missing.json", _Doc) is None
    assert ev.read("../escape.json", _Doc) is None  # a path named inside a document
