"""``manifest.json`` and ``evidence/runtime.json``: what exactly ran, as typed documents.

The manifest is written in Preflight, before anything starts, and read back by the report (the
run's spec chooses the type's section), by a recovered run's cleanup (the GPUs and their
baseline) and by the other side of an EVS pair (the settings the service really got). One
model for the writer and every reader: a key renamed in one place is renamed everywhere.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, RootModel

from state.evidence import MANIFEST, Document, Evidence

RUNTIME_FILE = "evidence/runtime.json"


class TemplateRef(Document):
    name: str
    spec: dict[str, Any]  # the template Deployment's spec, as the run copied it


class ServiceRef(Document):
    """The run's own service container."""

    container: str
    image: str
    imageId: str
    imageDigests: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    url: str


class HostRef(Document):
    name: str
    facts: dict[str, Any] = Field(default_factory=dict)  # the Host record's facts then


class GpuRef(Document):
    """The GPUs the run watches, their memory before it (MiB per UUID, or why not measured),
    and where its telemetry comes from."""

    ids: list[str] = Field(default_factory=list)
    memoryBaselineMiB: dict[str, int] | str = "not measured"
    telemetry: str = ""


class Settings(Document):
    VLLM_IGNORE_EOS: str = "unset"
    evs: dict[str, str] = Field(default_factory=dict)


class CodeRef(Document):
    version: str = "unknown"
    revision: str = "unknown"


class RuntimeStart(Document):
    """What one start of the run's service reported (``evidence/runtime.json`` lists each;
    the manifest's ``runtime`` is the first, with where it came from)."""

    container: str
    without: list[str] = Field(default_factory=list)  # variables it was started without
    reported: dict[str, Any] = Field(default_factory=dict)
    notReported: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    source: str | None = None


class RuntimeStarts(RootModel[list[RuntimeStart]]):
    """``evidence/runtime.json``: every start, in order."""


class RunManifest(Document):
    """``manifest.json``. ``spec`` is the Experiment's spec exactly as the run validated it;
    a reader that needs it typed parses it with its type's model (``ExperimentType.report``):
    the manifest itself does not change with the types there are."""

    runId: str = ""
    experiment: str = ""
    specHash: str = ""
    spec: dict[str, Any] = Field(default_factory=dict)
    specRevision: str | None = None
    sourceFile: str = ""
    template: TemplateRef | None = None
    service: ServiceRef | None = None
    model: dict[str, Any] = Field(default_factory=dict)
    host: HostRef | None = None
    gpus: GpuRef = Field(default_factory=GpuRef)
    settings: Settings = Field(default_factory=Settings)
    code: CodeRef = Field(default_factory=CodeRef)
    createdAt: str = ""
    runtime: RuntimeStart | None = None

    @property
    def type(self) -> str:
        return str(self.spec.get("type", ""))


def read_manifest(evidence: Evidence) -> RunManifest | None:
    return evidence.read(MANIFEST, RunManifest)


def record_start(evidence: Evidence, start: RuntimeStart) -> None:
    """Add one start to ``runtime.json``; the first also goes into the manifest."""
    starts = evidence.read(RUNTIME_FILE, RuntimeStarts) or RuntimeStarts([])
    evidence.write(RUNTIME_FILE, RuntimeStarts([*starts.root, start]))
    manifest = read_manifest(evidence)
    if manifest is not None and manifest.runtime is None:
        manifest.runtime = start.model_copy(update={"source": "the service's start-up log"})
        evidence.write(MANIFEST, manifest)
