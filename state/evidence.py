"""An Experiment run's evidence: one folder per run ID, written so that it can be trusted later.

``<evidenceRoot>/<runId>/`` holds what a person (or an auditor, months later) needs to believe a
result: ``status.json`` (phase, state, result; replaced atomically), ``events.jsonl``
(append-only), ``manifest.json`` (what exactly ran), one JSON file per gate under ``gates/``,
raw samples, service logs, the cleanup proof, and ``checksums.sha256`` over all of it.

Rules this module enforces, so that no caller can get them wrong:

- **A run ID is used once.** :meth:`Evidence.create` refuses a folder that exists (even
  empty): evidence of an earlier run is never mixed with or overwritten by a new one.
- **Nothing secret is written.** Every text and JSON value goes through the process redactor
  (secret values registered when they were resolved) before it touches the disk.
- **PASS needs its evidence.** :meth:`Evidence.finish` refuses ``PASS`` unless every gate the
  run declared was recorded as passed with non-empty evidence; a gate never recorded is not a
  pass, it is missing.
- **Sealed means checkable.** :meth:`Evidence.seal` lists the sha256 of every file;
  :func:`verify` re-reads them all and names each file that is missing, changed or not listed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from state.atomic import append_line_durable, ensure_dir, write_atomic
from state.errors import StateError
from state.models import utc_now
from state.redaction import DEFAULT_REDACTOR, Redactor

CHECKSUMS = "checksums.sha256"
STATUS = "status.json"
EVENTS = "events.jsonl"
MANIFEST = "manifest.json"
REPORT = "report.md"  # written by controllers.kinds.experiments.report, listed by `evidence`
PLOTS_DIR = "plots"
GATES_DIR = "gates"
Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
"""A run's one verdict, in its record, its evidence and its report."""
CHUNK = 1 << 20
RUN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{2,62}$")
"""A run ID is a folder name: no separators, no dot-dot, no leading dash (``specs.experiment``
holds the same pattern for the spec; a test keeps the two equal)."""


class Document(BaseModel):
    """The contents of one evidence file, written by its model and read back by the same one:
    a writer and its readers cannot disagree on a key. Keys are as the file has them. Reading
    is lenient: an unknown key is ignored, so a bundle written by another version still reads
    (:meth:`Evidence.read`)."""

    model_config = ConfigDict(extra="ignore")


DocumentT = TypeVar("DocumentT", bound=BaseModel)


class StatusDocument(Document):
    """``status.json``: where the run is, and its verdict once terminal."""

    phase: str
    state: str
    result: Verdict | None = None
    updatedAt: str = ""
    reason: str | None = None


class GateDocument(Document):
    """``gates/<name>.json``: one gate's verdict, why, and the evidence behind it (its shape
    is the gate's own: counts, stream IDs, the files that hold the detail). ``passed`` is
    true only as JSON's ``true``: a PASS stands on it (:meth:`Evidence.finish`)."""

    gate: str = ""
    passed: StrictBool
    reason: str | None = ""
    evidence: dict[str, Any] = Field(default_factory=dict)


class EvidenceError(StateError):
    """The evidence folder cannot be used as asked (exists, escapes its folder, unbacked PASS)."""


@dataclass(frozen=True)
class Gate:
    """One recorded gate: its verdict and why (the evidence file holds the detail)."""

    name: str
    passed: bool
    reason: str


class Evidence:
    """The evidence folder of one run (create it with :meth:`create`, reopen with ``open``)."""

    def __init__(self, folder: Path, redactor: Redactor = DEFAULT_REDACTOR) -> None:
        self.folder = folder
        self.redactor = redactor

    @classmethod
    def create(cls, root: Path, run_id: str, redactor: Redactor = DEFAULT_REDACTOR) -> Evidence:
        """A new, empty folder for ``run_id``; EvidenceError if one exists (IDs are single-use)."""
        folder = root / _checked(run_id)
        ensure_dir(root)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            raise EvidenceError(f"run ID {run_id} was used before: {folder} exists (a run ID "
                                "is used once; choose a new one)") from None
        return cls(folder, redactor)

    @classmethod
    def open(cls, root: Path, run_id: str, redactor: Redactor = DEFAULT_REDACTOR) -> Evidence:
        folder = root / _checked(run_id)
        if not folder.is_dir():
            raise EvidenceError(f"no evidence for run {run_id} under {root}")
        return cls(folder, redactor)

    # --- writing -------------------------------------------------------------------------------

    def path(self, relative: str) -> Path:
        """The file ``relative`` inside the folder; EvidenceError if it would leave it."""
        parts = Path(relative).parts
        if not parts or Path(relative).is_absolute() or ".." in parts:
            raise EvidenceError(f"evidence file {relative!r} must stay inside {self.folder}")
        return self.folder / relative

    def write_text(self, relative: str, text: str) -> Path:
        target = self.path(relative)
        ensure_dir(target.parent)
        write_atomic(target, self.redactor.scrub_text(text).encode("utf-8"))
        return target

    def write_bytes(self, relative: str, data: bytes) -> Path:
        """A binary file (a plot): drawn only from numbers already in the bundle, which were
        redacted when they were written, so there is no text here to scrub."""
        target = self.path(relative)
        ensure_dir(target.parent)
        write_atomic(target, data)
        return target

    def write_json(self, relative: str, data: Any) -> Path:
        return self.write_text(relative, json.dumps(self.redactor.scrub(data), indent=2,
                                                    sort_keys=True) + "\n")

    def write(self, relative: str, document: BaseModel) -> Path:
        """A typed document (:class:`Document`), as its model dumps it."""
        return self.write_json(relative, document.model_dump(mode="json"))

    def read(self, relative: str, model: type[DocumentT]) -> DocumentT | None:
        """The document at ``relative`` as ``model`` reads it; None when it is missing,
        unreadable, not of that shape, or named by a path that leaves the bundle (a gap in a
        report, not a failure)."""
        try:  # json, not pydantic's parser: an answer quoted in evidence may hold a lone
            # surrogate (a service's invalid Unicode, escaped when written), which it refuses
            return model.model_validate(json.loads(self.path(relative).read_text("utf-8")))
        except (OSError, ValueError, EvidenceError):  # ValidationError is a ValueError
            return None

    def event(self, reason: str, message: str, **fields: Any) -> None:
        """Append one event (never rewritten: the run's own history)."""
        line = {"time": utc_now(), "reason": reason, "message": message, **fields}
        append_line_durable(self.path(EVENTS), json.dumps(self.redactor.scrub(line),
                                                          sort_keys=True))

    def status(self, phase: str, state: str, result: Verdict | None = None,
               reason: str | None = None) -> None:
        """Replace ``status.json`` (atomic: a reader sees the old or the new one)."""
        self.write(STATUS, StatusDocument(phase=phase, state=state, result=result,
                                          updatedAt=utc_now(), reason=reason))

    def gate(self, name: str, passed: bool, reason: str, evidence: dict[str, Any]) -> Gate:
        """Record one gate with the evidence behind its verdict (``gates/<name>.json``)."""
        self.write(f"{GATES_DIR}/{name}.json", GateDocument(gate=name, passed=passed,
                                                            reason=reason, evidence=evidence))
        return Gate(name, passed, reason)

    def gates(self) -> dict[str, Gate]:
        """Every gate recorded with evidence (one without is not a gate: it is missing)."""
        found: dict[str, Gate] = {}
        for file in sorted((self.folder / GATES_DIR).glob("*.json")):
            doc = self.read(f"{GATES_DIR}/{file.name}", GateDocument)
            if doc is not None and doc.evidence:
                found[file.stem] = Gate(file.stem, doc.passed, doc.reason or "")
        return found

    def status_document(self) -> StatusDocument | None:
        return self.read(STATUS, StatusDocument)

    def finish(self, result: Verdict, declared: Iterable[str], reason: str) -> Verdict:
        """Write the terminal status. A PASS whose declared gates are not all recorded as
        passed, with evidence, becomes FAIL naming what is missing: PASS is never unbacked."""
        recorded, declared = self.gates(), list(declared)
        missing = [g for g in declared if g not in recorded]
        failed = [g for g in declared if g in recorded and not recorded[g].passed]
        if result == "PASS" and (missing or failed or not declared):
            why = "; ".join([*(f"gate {g} has no evidence" for g in missing),
                             *(f"gate {g} did not pass" for g in failed)]) or "no gate declared"
            result, reason = "FAIL", f"refused PASS: {why}"
        self.status("Done", "Terminal", result, reason=reason)
        self.event("Verdict", f"{result}: {reason}", result=result)
        return result

    def seal(self) -> Path:
        """Write ``checksums.sha256`` over every other file (sorted; ``sha256  path``)."""
        lines = [f"{_sha256(self.folder / rel)}  {rel}" for rel in _files(self.folder)
                 if rel != CHECKSUMS]
        target = self.folder / CHECKSUMS
        write_atomic(target, ("\n".join(lines) + "\n").encode("utf-8"))
        return target


def verify(folder: Path) -> list[str]:
    """Every problem with a sealed folder, one line each naming the file; [] when intact."""
    listing = folder / CHECKSUMS
    try:
        text = listing.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{listing}: cannot read the checksum list ({exc.__class__.__name__})"]
    problems: list[str] = []
    listed: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel or ".." in Path(rel).parts:
            problems.append(f"{listing}:{number}: not a 'sha256  path' line")
            continue
        listed[rel] = digest
    present = {rel for rel in _files(folder) if rel != CHECKSUMS}
    for rel, digest in sorted(listed.items()):
        path = folder / rel
        if rel not in present:
            problems.append(f"{path}: listed but missing")
            continue
        try:
            same = _sha256(path) == digest
        except OSError as exc:
            problems.append(f"{path}: cannot be read ({exc.strerror or exc.__class__.__name__})")
            continue
        if not same:
            problems.append(f"{path}: changed (sha256 differs from {CHECKSUMS})")
    problems += [f"{folder / rel}: not in {CHECKSUMS} (added after sealing)"
                 for rel in sorted(present - set(listed))]
    problems += [f"{folder / rel}: not a regular file (a link, pipe or device is not evidence)"
                 for rel in _files(folder, odd=True)]
    return problems


def _files(folder: Path, odd: bool = False) -> list[str]:
    """Every regular file under ``folder`` (or, with ``odd``, everything else that is not a
    folder: links, pipes, devices), relative, sorted; nothing is followed or opened."""
    found = []
    for base, dirs, files in os.walk(folder, followlinks=False):
        for name in files + dirs:
            path = Path(base) / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            regular, folder_like = stat.S_ISREG(mode), stat.S_ISDIR(mode)
            if (not regular and not folder_like) if odd else regular:
                found.append(str(path.relative_to(folder)))
    return sorted(found)


def _checked(run_id: str) -> str:
    if not RUN_ID_RE.fullmatch(run_id):
        raise EvidenceError(f"{run_id!r} is not a run ID (lowercase letters, digits, '.', '_' "
                            "and '-', 3 to 63 characters, starting with a letter or digit)")
    return run_id


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
