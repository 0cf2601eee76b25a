"""Controller errors and how the engine should treat them.

- ``ControllerError``      base; always carries a message fit for a person.
  - ``TemporaryError``     retry with backoff (engine unreachable, API hiccup, busy server).
    - ``PullFailed``       an image could not be brought to its Host (the registry's reason);
                           nothing running was touched.
    - ``HostUnreachable``  the Host's engine does not answer; its resources are Degraded, never
                           deleted.
  - ``StillProgressing``   not failed, not done: a phase under way (a model loading); look
                           again after ``after_s`` rather than hold a worker while it runs.
  - ``PermanentError``     retrying will not help until the spec or the world changes: the
                           resource goes ``Stalled`` with this message.
    - ``PlanError``        a rule judged against observed facts failed; carries SpecIssues.
    - ``ReadinessFailed``  the service did not become ready (timeout, fatal marker, exit).
      - ``ContainerPaused`` the container is paused (``docker pause``); a person resumes it.
    - ``SecretUnavailable`` a secret reference could not be resolved (names the ref, never a
                           value).
      - ``SecretRefused``  the value exists but cannot be used (not a regular file, too large,
                           control characters); refused at plan time, before anything changes.
"""

from __future__ import annotations

from specs.errors import SpecIssue


class ControllerError(Exception):
    """Base of every controller error. ``reason``: the condition reason it is recorded under
    (empty: the engine's default for its branch of the tree)."""

    reason: str = ""


class TemporaryError(ControllerError):
    """Worth retrying with backoff."""


class PullFailed(TemporaryError):
    """An image pull (or the checks around it: room on the Host, the digest) failed."""

    reason = "PullFailed"


class HostUnreachable(TemporaryError):
    """A Host's Docker engine did not answer."""


class StillProgressing(ControllerError):
    """A phase is under way (e.g. readiness); the pass ends here and is re-checked later."""

    def __init__(self, message: str, after_s: float) -> None:
        self.after_s = after_s
        super().__init__(message)


class PermanentError(ControllerError):
    """Not worth retrying until something changes."""


UNSEEN_CURE_RETRY_S = 5.0
"""The longest wait between tries of a refusal whose cure sends no event (a port another
process frees): such a try is one bind probe, so it is cheap to look often, and the service
comes back within seconds of the cure however long it was blocked (the backoff alone grew to
its 30 s cap, and a try landing just before the cure made that a minute)."""


class PlanError(PermanentError):
    """Spec rules that needed observed facts failed. ``transient``: only because of something
    the world may change without telling us (a port held by another process, which frees it
    without an event): retried at most :data:`UNSEEN_CURE_RETRY_S` apart rather than Stalled
    until the next resync."""

    def __init__(self, issues: list[SpecIssue], transient: bool = False) -> None:
        self.issues = issues
        self.transient = transient
        super().__init__("\n".join(str(i) for i in issues))


class ReadinessFailed(PermanentError):
    """The service did not become ready; ``reason`` is a short CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class ReadinessTimedOut(ReadinessFailed):
    """Not ready within the budget; ``detail`` is what the last probe saw."""

    def __init__(self, budget_s: float, detail: str) -> None:
        self.detail = detail
        super().__init__("ReadinessTimeout", f"not ready after {budget_s:g}s: {detail}")


class ContainerPaused(ReadinessFailed):
    """The container is paused. Not unpaused for the person who paused it: reported instead."""

    REASON = "Paused"

    def __init__(self, message: str) -> None:
        super().__init__(self.REASON, message)


class SecretUnavailable(PermanentError):
    """A secret reference could not be resolved."""


class SecretRefused(SecretUnavailable):
    """A secret's value exists but cannot be used; the message names the reference only."""
