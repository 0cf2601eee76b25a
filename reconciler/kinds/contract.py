"""The contract every kind implements, and the typed result of one pass.

One protocol for Host, Deployment, StreamSet and whatever comes next (Experiment): observe and
plan without side effects, act on a plan, delete what a record says we own, and name the kinds
and resources it depends on. The daemon, ``plan``, ``apply``, ``delete`` and ``status`` only
ever talk to this protocol through the registry (``reconciler.kinds.registry``), so a new kind
is a new implementation, never a new branch elsewhere.

A pass ends in a ``Result`` — ok, or a reason with what to do next: back off and retry, wait
for a dependency (woken by it, no backoff), re-check after a delay (a phase still under way,
such as a model loading), or stop until the spec changes (terminal). ``guarded`` is the one
place where exceptions become results, as controller-runtime's ``Result``/``TerminalError``
and kopf's ``TemporaryError(delay=)`` do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog
from pydantic import BaseModel

from controllers.errors import (
    ControllerError,
    PermanentError,
    ReadinessFailed,
    StillProgressing,
)
from controllers.http_api import ClientPool
from controllers.waiting import Stopped
from specs.errors import SpecIssue
from specs.models import Metadata, Strict
from state.errors import StateError
from state.models import ResourceStatus

if TYPE_CHECKING:
    from reconciler.kinds.services import Services
    from specs.validate import SpecSet

log = structlog.get_logger("reconciler.kinds")


class SpecResource(Protocol):
    """What every kind's spec model has (apiVersion, kind, metadata, spec)."""

    @property
    def kind(self) -> str: ...

    @property
    def metadata(self) -> Metadata: ...

    @property
    def spec(self) -> BaseModel: ...


def key_of(resource: SpecResource) -> str:
    return f"{resource.kind}/{resource.metadata.name}"


class ActionLike(Protocol):
    @property
    def verb(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def cause(self) -> str: ...


class PlanLike(Protocol):
    """A kind's plan: the actions it would take, each with its cause, or a conflict."""

    @property
    def actions(self) -> Sequence[ActionLike]: ...

    @property
    def conflict(self) -> str | None: ...

    @property
    def changes(self) -> bool: ...


@dataclass
class ResourcePlan:
    """The plan for one resource, or why it cannot be planned. ``desired`` is the kind's own
    resolved view of the spec (opaque to everyone else). A plan with neither ``plan`` nor
    ``error`` has nothing to show (a Host: observed, nothing of it is ours to change)."""

    resource: str
    name: str
    desired: object | None = None
    plan: PlanLike | None = None
    issues: list[SpecIssue] = field(default_factory=list)
    error: str | None = None
    error_reason: str = ""
    permanent: bool = True
    waiting: str | None = None  # a dependency is not ready: act records why and waits

    @property
    def changes(self) -> bool:
        return self.plan is not None and self.plan.changes


@dataclass(frozen=True)
class Result:
    """How one pass over a resource ended.

    - ``ok``: converged (or deleted). ``changed``: something was done (dependents re-check).
    - not ok, ``terminal``: Stalled until the spec or the world changes; no backoff retry.
    - not ok, ``waiting``: a dependency is not ready; its success wakes this resource.
    - ``requeue_after``: look again after this many seconds (a phase under way); no backoff.
    - otherwise: retry with backoff.
    ``wake``: other resources to look at now (e.g. a GPU this one held is free).
    """

    resource: str
    ok: bool
    message: str
    reason: str = ""
    changed: bool = False
    terminal: bool = False
    waiting: bool = False
    requeue_after: float | None = None
    wake: tuple[str, ...] = ()

    @property
    def retry(self) -> bool:
        """Worth another try with backoff."""
        return not (self.ok or self.terminal or self.waiting or self.requeue_after is not None)


class Hooks(Protocol):
    """What a kind may ask of whoever runs it (the daemon; ``apply`` ignores most of it)."""

    def watch_host(self, host: BaseModel) -> None:
        """Follow this Host's Docker events (its resources are repaired from them)."""

    def unwatch_host(self, name: str) -> None: ...

    def conflict(self, key: str, host: str, held: bool) -> None:
        """``key`` cannot act because a foreign container holds its name on ``host``; wake it
        when a container there goes."""

    def wake(self, key: str) -> None:
        """Look at ``key`` again now (work beside the queue, e.g. an experiment run, ended)."""


class NoHooks:
    """For one-shot commands: nothing to watch, nobody to wake."""

    def watch_host(self, host: BaseModel) -> None:
        return None

    def unwatch_host(self, name: str) -> None:
        return None

    def conflict(self, key: str, host: str, held: bool) -> None:
        return None

    def wake(self, key: str) -> None:
        return None


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
    pending: frozenset[str] = frozenset()  # keys that will change earlier in this run (plan)
    wait_ready: bool = True  # False in the daemon: readiness is a phase re-checked later
    clients: ClientPool = field(default_factory=ClientPool)  # closed when the pass ends


class Kind(Protocol):
    """One kind of resource. ``depends_on``: kinds whose resources must be converged first
    (and that wake this kind's resources when they change)."""

    name: str
    model: type[Strict]
    depends_on: tuple[str, ...]
    owns: bool  # its records stand for things we created (the prune guard protects them)

    def references(self, resource: SpecResource) -> list[str]:
        """Keys of the resources this one depends on (must exist in the spec set)."""
        ...

    def recorded_references(self, record: ResourceStatus) -> list[str]:
        """Keys a recorded resource depends on (it is deleted before them)."""
        ...

    def plan(self, ctx: PassContext, resource: SpecResource) -> ResourcePlan:
        """Observe (read-only) and plan. Never writes, never acts."""
        ...

    def act(self, ctx: PassContext, rp: ResourcePlan) -> Result:
        """Carry out a plan (re-checking what may have changed since it was made)."""
        ...

    def delete(self, ctx: PassContext, record: ResourceStatus) -> Result:
        """Remove what ``record`` says we own, then forget the record."""
        ...


def guarded(resource: str, step: Callable[[], Result],
            on_failure: Callable[[str, str, bool], None] | None = None) -> Result:
    """Run one step of a pass; any exception becomes a Result with its message.

    A ControllerError carries its own verdict (temporary or permanent). A state directory
    error is re-raised: the CLI names the file, the daemon moves a corrupt one aside.
    Anything else is a bug in a kind: reported as a failed pass with its message and retried
    with backoff, never a traceback from ``apply`` or a dead worker.
    ``on_failure(reason, message, stalled)`` records it where people look.
    """
    try:
        return step()
    except StateError:
        raise  # the state directory, not the resource: the caller names the file
    except Stopped as exc:  # shutting down: nothing failed, the next run resumes it
        return Result(resource, False, f"Stopped: {exc}", "Stopped", terminal=True)
    except StillProgressing as exc:  # recorded as Progressing by whoever raised it
        return Result(resource, False, str(exc), "Progressing", requeue_after=exc.after_s)
    except ControllerError as exc:
        # Stalled: a person must look. A service that failed to become ready is Stalled but
        # still retried with backoff (a crashed load may get its GPU memory back).
        stalled = isinstance(exc, PermanentError)
        retry = not stalled or isinstance(exc, ReadinessFailed)
        reason = exc.reason if isinstance(exc, ReadinessFailed) else (
            "ApplyFailed" if stalled else "TemporaryFailure")
        message = str(exc)
    except Exception as exc:
        log.exception("pass.crashed", resource=resource)
        stalled, retry, reason = False, True, "InternalError"
        message = f"{type(exc).__name__}: {exc} (a bug: please report it)"
    if on_failure is not None:
        try:
            on_failure(reason, message, stalled)
        except StateError:
            raise
        except Exception:
            log.exception("pass.failure_unrecorded", resource=resource)
    return Result(resource, False, f"{reason}: {message}", reason, terminal=not retry)


def unplanned(ctx: PassContext, rp: ResourcePlan, digest: str | None) -> Result:
    """A resource that could not be planned (``rp.error``): record why, retry if not permanent."""
    message = rp.error or "not planned"
    reason = rp.error_reason or "Error"
    ctx.services.record_failure(rp.resource, reason, message, rp.permanent, digest)
    return Result(rp.resource, False, message, reason, terminal=rp.permanent)
