"""What an experiment type is: the contract the run and the Experiment kind hold it to.

Why a contract: the run (``run.py``) owns the phases every type shares — Preflight, the
container guard, telemetry, Collecting, one cleanup with its proof, the verdict — and the
Experiment kind owns planning and the record. A type brings only what differs: the gates a
PASS needs, what ``plan`` says it will do, and the Running phase itself. A new type is a new
implementation registered in ``types.py``, never a branch in the run or the kind.

``RunContext`` is how a type reaches the world while it runs: it starts and retires the run's
service (a type decides whether one service serves the whole run or each attempt gets a fresh
one), and the services of other versions a type compares it with (``companions``: a
promotion's copy of the running version), publishes sources (once each, whatever asks), and
writes ahead what it may create.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from controllers.errors import ControllerError
from controllers.kinds.experiments.driver import DELETE_PROOF_S, LoadDriver
from controllers.kinds.experiments.harnessproc import Launcher
from controllers.kinds.experiments.manifest import RunManifest
from controllers.kinds.experiments.reportparts import Section
from controllers.kinds.experiments.service import RunService
from controllers.kinds.experiments.streams import CanarySource
from specs.experiments.base import CanaryPublisher, ExperimentSpecBase
from specs.models import DeploymentSpec
from state.evidence import Evidence, Verdict
from state.store import Store


@dataclass(frozen=True)
class PlannedStep:
    """One line of what ``plan`` says a run will do."""

    verb: str
    target: str
    cause: str


# One experiment type's spec. A context is read, never given another spec: covariant, so
# the machinery types share (the harness) takes a context of any type.
X_co = TypeVar("X_co", bound=ExperimentSpecBase, covariant=True)
X_contra = TypeVar("X_contra", bound=ExperimentSpecBase, contravariant=True)


@dataclass
class RunContext(Generic[X_co]):
    spec: X_co
    evidence: Evidence
    stop: threading.Event
    progress: Callable[[str], None]  # the Running phase's message
    # A fresh service, ready (ControllerError if not), without the named variables and
    # secrets of its template (an empty set: all of them).
    launch: Callable[[frozenset[str]], RunService]
    # Keep the service's log as logs/<name>.log, then stop and remove it.
    retire_service: Callable[[RunService, str], None]
    publish: Callable[[list[CanarySource], CanaryPublisher], dict[str, str]]  # name → URL
    note_streams: Callable[[list[str]], None]  # write-ahead
    stream_id: Callable[[str, str], str]  # (part, source) → the run's deterministic ID
    env_names: Callable[[RunService], list[str] | None]  # as it runs, image's own included
    launcher: Launcher  # where the harness runs: beside this run, or on its Host
    # Wait (at most the seconds given) for the run's GPUs to hold no more memory than at
    # Preflight: what was measured (MiB per GPU, or why not) and a problem per GPU that did
    # not come back. A run without GPUs or telemetry: "not measured (why)", no problem.
    gpu_back: Callable[[float], tuple[dict[str, int] | str, list[str]]]
    # The run's GPUs' memory at Preflight (MiB per GPU; None: not measured).
    gpu_baseline: Callable[[], dict[str, int] | None] = lambda: None
    # A fresh service of one of the type's ``companions``, by name, in the run's room, ready
    # (ControllerError if not, or if the run has no such companion).
    companion: Callable[[str], RunService] = lambda name: _no_companion(name)
    # Write-ahead: the run adds streams to a service it does not own, at this URL (a
    # promotion's running version): its recovery deletes the run's noted streams there too.
    note_foreign: Callable[[str], None] = lambda url: None
    # Earlier runs the run reads, by role (its type's ``earlier``), each beside its own bundle
    # (``evidence.folder.parent / run_id``): a promotion's last accepted qualification.
    earlier: Mapping[str, str] = field(default_factory=dict)

    def start_service(self, without: frozenset[str] = frozenset()) -> RunService:
        return self.launch(without)

    def driver(self, service: RunService, sources: list[CanarySource], urls: dict[str, str],
               max_tokens: int, chunk_s: int) -> LoadDriver:
        """Live load against ``service`` (deletions proven within the cleanup deadline)."""
        return LoadDriver(
            sources=sources, urls=urls, model=service.model_id,
            make_client=service.client,
            stream_id=self.stream_id, note_streams=self.note_streams, evidence=self.evidence,
            stop=self.stop, progress=self.progress, max_tokens=max_tokens, chunk_s=chunk_s,
            delete_s=min(DELETE_PROOF_S, float(self.spec.cleanupSeconds)))


def _no_companion(name: str) -> RunService:
    raise ControllerError(f"the run has no companion service {name!r} (a bug: please report it)")


class StartsWhenLaunched:
    """A type whose run starts as soon as it is planned and measures its own service only
    (every type but a promotion's)."""

    informs_template = False

    def companions(self, spec: ExperimentSpecBase, store: Store) -> dict[str, DeploymentSpec]:
        return {}

    def earlier(self, spec: ExperimentSpecBase, store: Store) -> dict[str, str]:
        return {}

    def waits_for(self, spec: ExperimentSpecBase, store: Store) -> str | None:
        return None

    def run_id(self, spec: ExperimentSpecBase, store: Store) -> str:
        return spec.runId


class ExperimentType(Protocol[X_contra]):
    """One experiment type, typed by its spec (``specs/experiments/<type>.py``): what it is
    given is its own spec, with its block, never an optional one to unwrap."""

    name: str
    # Whether its template waits on its verdict (a promotion's Deployment): the template is
    # woken when the verdict is read, not at its next resync.
    informs_template: bool

    def local_only(self, spec: X_contra) -> bool:
        """Whether the run starts a process beside the reconciler (the harness of a run in the
        reconciler's process): only on a Host whose engine is this machine's (a job starts it
        on its own Host instead)."""
        ...

    def declared_gates(self, spec: X_contra) -> list[str]:
        """The gates a PASS needs (the run adds its cleanup gate)."""
        ...

    def waits_for(self, spec: X_contra, store: Store) -> str | None:
        """Why the run does not start now, or None: it does. A promotion run waits until its
        Deployment asks for its candidate to be qualified; every other type starts at once."""
        ...

    def run_id(self, spec: X_contra, store: Store) -> str:
        """The run ID its run goes by: ``spec.runId``, or (a promotion run) the attempt at
        the same candidate a person asked for."""
        ...

    def companions(self, spec: X_contra, store: Store) -> dict[str, DeploymentSpec]:
        """Other versions of its template the run starts in its own room, by name, frozen
        with the run when it is launched (a promotion's capacity gate: a fresh copy of the
        running version, searched as the candidate is). Empty for most types."""
        ...

    def earlier(self, spec: X_contra, store: Store) -> dict[str, str]:
        """Earlier runs whose evidence the run reads, by role, found in the fleet's state when
        it is launched and frozen with it (a promotion's ``baseline: lastAccepted``: the run
        that promoted the running version). Empty for most types."""
        ...

    def planned(self, spec: X_contra) -> list[PlannedStep]:
        """What the run will publish, register and judge, for ``plan``."""
        ...

    def execute(self, ctx: RunContext[X_contra]) -> tuple[Verdict, str]:
        """The Running phase: the result and, unless PASS, why."""
        ...

    def report(self, evidence: Evidence, manifest: RunManifest) -> Section:
        """This type's section of ``report.md`` (and its latency plot), from the evidence
        files it wrote and the bundle's manifest only: a run recovered after a crash, whose
        memory is gone, is reported the same way. Empty when it wrote none."""
        ...
