"""The contract every kind implements, and the typed result of one pass.

One protocol for Host, Deployment, StreamSet and whatever comes next (Experiment): observe and
plan without side effects, act on a plan, delete what a record says we own, and name the kinds
and resources it depends on. The daemon, ``plan``, ``apply``, ``delete`` and ``status`` only
ever talk to this protocol through the registry (``reconciler.kinds.registry``), so a new kind
is a new implementation, never a new branch elsewhere.

A pass ends in a ``Result`` with one ``Outcome``: done, retry with backoff, wait for a
dependency (woken by it, no backoff), re-check after a delay (a phase still under way, such as
a model loading), terminal (Stalled until the spec changes) or stopped (shutdown: nothing
failed). ``guarded`` is the one
place where exceptions become results, as controller-runtime's ``Result``/``TerminalError``
and kopf's ``TemporaryError(delay=)`` do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeVar

import structlog

from controllers.actions import Action
from controllers.clients.http_api import ClientPool
from controllers.errors import (
    UNSEEN_CURE_RETRY_S,
    ControllerError,
    PermanentError,
    PlanError,
    ReadinessFailed,
    StillProgressing,
)
from controllers.waiting import Stopped
from specs.errors import SpecIssue
from specs.kinds import SpecKind
from specs.models import SpecResource
from state.errors import StateError
from state.keys import Key
from state.models import ResourceStatus

if TYPE_CHECKING:
    from controllers.services import Services
    from specs.validate import SpecSet

log = structlog.get_logger("reconciler.kinds")


def key_of(resource: SpecResource) -> Key:
    return Key(resource.kind, resource.metadata.name)


class PlanLike(Protocol):
    """A kind's plan: the actions it would take, each with its cause, or a conflict."""

    @property
    def actions(self) -> Sequence[Action]: ...

    @property
    def conflict(self) -> str | None: ...

    @property
    def changes(self) -> bool: ...


S = TypeVar("S", bound=SpecResource, contravariant=True)  # a kind's spec model
D = TypeVar("D")  # its resolved desired state
P = TypeVar("P", bound=PlanLike)  # its plan


@dataclass
class ResourcePlan(Generic[D, P]):
    """The plan for one resource, or why it cannot be planned. ``desired`` is the kind's own
    resolved view of the spec (opaque to everyone else). A plan with neither ``plan`` nor
    ``outcome`` has nothing to show (a Host: observed, nothing of it is ours to change).

    ``outcome``: set when the resource cannot be planned, and then the very :class:`Result`
    its pass ends with (the type an act returns too): one way to say how a pass ended,
    whether planning or acting failed."""

    resource: Key
    name: str
    desired: D | None = None
    plan: P | None = None
    issues: list[SpecIssue] = field(default_factory=list)
    outcome: Result | None = None
    waiting: str | None = None  # a dependency is not ready: act records why and waits

    @property
    def changes(self) -> bool:
        return self.plan is not None and self.plan.changes

    @property
    def error(self) -> str | None:
        """Why it cannot be planned (None: it can)."""
        return None if self.outcome is None else self.outcome.message

    def refuse(self, message: str, reason: str, *, permanent: bool = True) -> Self:
        """It cannot be planned: the pass ends Stalled (``permanent``) or retried. A refusal
        by a rule that is not permanent (issues, say a port another process holds) is looked
        at again within seconds: its cure sends no event."""
        report = Report(detail=message)
        if permanent:
            self.outcome = terminal(self.resource, message, reason, report=report)
        else:
            within = UNSEEN_CURE_RETRY_S if self.issues else 0.0
            self.outcome = replace(retry(self.resource, message, reason, report=report),
                                   retry_within_s=within)
        return self

    def failed(self, exc: Exception) -> Self:
        """Write why planning failed into this plan (and return it): the one place where
        plan-time exceptions become plan outcomes. A refusal by a rule that needed observed
        facts (PlanError) carries its issues; a failed observation (ControllerError) is retried
        unless permanent; anything else is a bug in a kind, retried with backoff."""
        if isinstance(exc, PlanError):
            self.issues = exc.issues
            return self.refuse(str(exc), "PlanRejected", permanent=not exc.transient)
        if isinstance(exc, ControllerError):
            return self.refuse(str(exc), "ObserveFailed",
                               permanent=isinstance(exc, PermanentError))
        log.error("plan.crashed", resource=self.resource, exc_info=exc)
        return self.refuse(f"{type(exc).__name__}: {exc} (a bug: please report it)",
                           "InternalError", permanent=False)

    @contextmanager
    def observing(self) -> Iterator[Self]:
        """Planning steps run inside: a refusal or a failed observation is written into this
        plan (:meth:`failed`) instead of raised; the steps done before it stay (``desired``)."""
        try:
            yield self
        except ControllerError as exc:
            self.failed(exc)


class Outcome(Enum):
    """How one pass over a resource ended, and so what comes next."""

    DONE = "done"  # converged (or deleted); ``changed``: something was done
    RETRY = "retry"  # failed: back off and try again
    WAIT = "wait"  # a dependency is not ready: its change wakes this resource, no backoff
    RECHECK = "recheck"  # a phase under way (a model loading): look again after ``after_s``
    TERMINAL = "terminal"  # Stalled until the spec or the world changes: no retry
    STOPPED = "stopped"  # ended early on purpose (shutdown, a newer spec): nothing failed


@dataclass(frozen=True)
class Report:
    """What a pass says of its resource, for the engine to write into its record in one go at
    the end of the pass (``controllers.passstatus``): the kind's facts (``facts``, applied to
    the record as it is then: a background writer's changes meanwhile are kept) and what its
    conditions say (``detail``; the outcome decides which conditions). ``stalled``: a person
    must look (default: the outcome is terminal); ``ready``: Ready's status on a failure
    (default: Unknown, or False when stalled); ``known``: the record as this pass read it,
    when the pass alone writes what ``facts`` changes (nothing is read again if it already
    says all of it)."""

    detail: str = ""
    facts: Callable[[ResourceStatus], None] | None = None
    stalled: bool | None = None
    ready: Literal["False", "Unknown"] | None = None
    known: ResourceStatus | None = None


@dataclass(frozen=True)
class Result:
    """How one pass over a resource ended (made with :func:`done`, :func:`retry`,
    :func:`wait`, :func:`recheck`, :func:`terminal` or :func:`stopped`).

    ``changed``: something was done (dependents re-check). ``wake``: other resources to look
    at now (e.g. a GPU this one held is free). ``report``: what the engine writes into the
    record when the pass ends (None: nothing; the kind's record is written elsewhere, as an
    Experiment's by its run).
    """

    resource: Key
    outcome: Outcome
    message: str
    reason: str = ""
    changed: bool = False
    # RECHECK: seconds until the next look; DONE: done now, and looked at again then (a
    # promotion's bake under watch); nothing else.
    after_s: float = 0.0
    wake: tuple[Key, ...] = ()
    report: Report | None = None
    # RETRY only: the backoff's ceiling for a failure whose cure sends no event (0: the queue's)
    retry_within_s: float = 0.0

    def __post_init__(self) -> None:
        if self.after_s and self.outcome not in (Outcome.RECHECK, Outcome.DONE):
            raise ValueError("after_s goes with a RECHECK or DONE outcome only")
        if self.retry_within_s and self.outcome is not Outcome.RETRY:
            raise ValueError("retry_within_s goes with a RETRY outcome only")

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.DONE


def done(resource: Key, message: str, reason: str = "", *, changed: bool = False,
         wake: tuple[Key, ...] = (), report: Report | None = None,
         after_s: float = 0.0) -> Result:
    """Converged; ``after_s``: look again then all the same (the daemon; ``apply`` ends)."""
    return Result(resource, Outcome.DONE, message, reason, changed, after_s, wake, report)


def retry(resource: Key, message: str, reason: str, *, changed: bool = False,
          wake: tuple[Key, ...] = (), report: Report | None = None) -> Result:
    return Result(resource, Outcome.RETRY, message, reason, changed, 0.0, wake, report)


def wait(resource: Key, message: str, reason: str, *, report: Report | None = None) -> Result:
    return Result(resource, Outcome.WAIT, message, reason, report=report)


def recheck(resource: Key, message: str, reason: str, after_s: float, *,
            changed: bool = False) -> Result:
    return Result(resource, Outcome.RECHECK, message, reason, changed, after_s)


def terminal(resource: Key, message: str, reason: str, *, changed: bool = False,
             wake: tuple[Key, ...] = (), report: Report | None = None) -> Result:
    return Result(resource, Outcome.TERMINAL, message, reason, changed, 0.0, wake, report)


def stopped(resource: Key, message: str) -> Result:
    return Result(resource, Outcome.STOPPED, message, "Stopped")


class Hooks(Protocol):
    """What a pass may ask of whoever runs it (the daemon; one-shot commands ignore it)."""

    def wake(self, key: Key) -> None:
        """Look at ``key`` again now (work beside the queue, e.g. an experiment run, ended)."""


class NoHooks:
    """For one-shot commands: nobody to wake."""

    def wake(self, key: Key) -> None:
        return None


class Runtime(Protocol):
    """What a kind's background work may ask of the daemon that runs it (``Kind.background``):
    threads under its supervisor, and wake-ups through its work queue."""

    @property
    def stop(self) -> threading.Event:
        """Set when the daemon shuts down: every background loop ends with it."""
        ...

    def spawn(self, name: str, run: Callable[[], None], forever: bool = True) -> None:
        """Run ``run`` in a supervised thread (restarted if it dies; ``forever``: returning
        before shutdown is a death too)."""
        ...

    def wake(self, key: Key) -> None:
        """Look at ``key`` now."""
        ...

    def wake_dependents(self, key: Key) -> None:
        """Look now at everything that depends on ``key``."""
        ...

    def mine(self, key: Key) -> bool:
        """Whether this daemon acts on ``key``: one replica among others acts on its shares
        only (``reconciler.sharing``); background work skips what another replica holds."""
        ...


@dataclass(frozen=True)
class PassContext:
    """Everything one pass works from, fixed when it starts: the revision and spec set it
    records (never a later one loaded meanwhile), the stop event every wait honours, an
    optional deadline (``apply --timeout``), the shared services and the hooks."""

    revision: str | None
    spec_set: SpecSet | None
    stop: threading.Event
    services: Services
    hooks: Hooks = field(default_factory=NoHooks)
    timeout_s: float | None = None
    pending: frozenset[Key] = frozenset()  # keys that will change earlier in this run (plan)
    wait_ready: bool = True  # False in the daemon: readiness is a phase re-checked later
    clients: ClientPool = field(default_factory=ClientPool)  # closed when the pass ends

    def waiting_for(self, spec: SpecKind, resource: SpecResource) -> tuple[Key, str] | None:
        """The first resource ``resource`` must see Ready before it acts (its kind's
        ``ready_first`` references) that is not, and why: it changes earlier in this run
        (``pending``: a plan is made from the record), or its record is not Ready at its
        current spec. None: nothing to wait for. The engine gates ``act`` on it; a kind's
        ``plan`` asks it to plan without asking a service that is not there yet."""
        from specs.validate import spec_hash

        for ref, name in spec.named(resource):
            if not ref.ready_first:
                continue
            key = Key(ref.kind, name)
            if key in self.pending:
                return key, f"after {key} is Ready"
            wanted = self.spec_set.get(ref.kind, name) if self.spec_set is not None else None
            record = self.services.store.load(key)
            ready = record.condition("Ready") if record is not None else None
            if wanted is None or record is None or ready is None or ready.status != "True":
                return key, f"waiting for {key} to be Ready"
            wanted_hash = spec_hash(wanted)
            if record.observed_generation != wanted_hash and not _holds(key, record,
                                                                         wanted_hash):
                return key, f"waiting for {key} to converge to its current spec"
        return None


def _holds(key: Key, record: ResourceStatus, wanted: str) -> bool:
    """Whether ``key``'s record says it serves another version on purpose (its kind's facts:
    ``Facts.holds``): what depends on it acts against what serves."""
    from controllers.facts import Facts

    model = Facts.for_kind(key.kind)
    return model is not None and model.of(record).holds(wanted)


class Kind(Protocol[S, D, P]):
    """One kind of resource, typed by its spec model ``S``, its desired state ``D`` and its
    plan ``P``: what ``plan`` returns is what ``act`` receives, with no downcast between.
    The kinds it depends on are those its references name (``spec.depends_on``): converged
    first, and their changes wake its resources."""

    name: str
    spec: SpecKind  # its model, rules and references, declared once (specs.kinds)
    owns: bool  # its records stand for things we created (the prune guard protects them)
    max_parallel: int | None  # passes at once in the daemon (None: its --workers)

    def references(self, resource: S) -> list[Key]:
        """Keys of the resources this one depends on (must exist in the spec set)."""
        ...

    def recorded_references(self, record: ResourceStatus) -> list[Key]:
        """Keys a recorded resource depends on (it is deleted before them)."""
        ...

    def plan(self, ctx: PassContext, resource: S) -> ResourcePlan[D, P]:
        """Observe (read-only) and plan. Never writes, never acts."""
        ...

    def act(self, ctx: PassContext, rp: ResourcePlan[D, P]) -> Result:
        """Carry out a plan (re-checking what may have changed since it was made)."""
        ...

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        """Remove what ``record`` says we own, then forget the record."""
        ...

    def background(self, services: Services, runtime: Runtime) -> None:
        """Start what this kind runs beside the work queue in the daemon (event watches,
        workers such as the frame watch), under ``runtime``'s supervisor. One-shot commands
        never call it."""
        ...


def declared_references(spec: SpecKind, resource: SpecResource) -> list[Key]:
    """The keys of what ``resource`` references, as its kind declares them."""
    return [Key(ref.kind, name) for ref, name in spec.named(resource)]


def guarded(resource: Key, step: Callable[[], Result], report: bool = True) -> Result:
    """Run one step of a pass; any exception becomes a Result with its message, and (unless
    ``report`` is False) with a :class:`Report` for the engine to record where people look.

    A ControllerError carries its own verdict (temporary or permanent). A state directory
    error is re-raised: the CLI names the file, the daemon moves a corrupt one aside.
    Anything else is a bug in a kind: reported as a failed pass with its message and retried
    with backoff, never a traceback from ``apply`` or a dead worker.
    """
    try:
        return step()
    except StateError:
        raise  # the state directory, not the resource: the caller names the file
    except Stopped as exc:  # shutting down: nothing failed, the next run resumes it
        return stopped(resource, f"Stopped: {exc}")
    except StillProgressing as exc:  # recorded as Progressing by whoever raised it
        return recheck(resource, str(exc), "Progressing", exc.after_s)
    except ControllerError as exc:
        # Stalled: a person must look. A service that failed to become ready is Stalled but
        # still retried with backoff (a crashed load may get its GPU memory back).
        stalled = isinstance(exc, PermanentError)
        again = not stalled or isinstance(exc, ReadinessFailed)
        reason = exc.reason or ("ApplyFailed" if stalled else "TemporaryFailure")
        message = str(exc)
    except Exception as exc:
        log.exception("pass.crashed", resource=resource)
        stalled, again, reason = False, True, "InternalError"
        message = f"{type(exc).__name__}: {exc} (a bug: please report it)"
    said = Report(detail=message, stalled=stalled) if report else None
    return (retry if again else terminal)(resource, f"{reason}: {message}", reason, report=said)


def unplanned(rp: ResourcePlan[Any, Any]) -> Result:
    """How the pass over a resource that could not be planned ends (``rp.outcome``)."""
    if rp.outcome is not None:
        return rp.outcome
    return terminal(rp.resource, "not planned", "Error", report=Report(detail="not planned"))


AnyKind = Kind[Any, Any, Any]
"""A kind whatever its types: what the registry, the engine and the daemon hold."""
AnyPlan = ResourcePlan[Any, Any]
