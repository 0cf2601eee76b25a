"""What an Experiment's record says about its run (``ResourceStatus.facts``; see
``controllers.facts``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import Field

from controllers.facts import Facts, RunOutcome, seconds_since
from state.models import ResourceStatus


class ExperimentStatusFacts(RunOutcome):
    """An Experiment: the run it stands for, where it is, and (once terminal) its verdict.

    ``phase`` is Pending, Preflight, Running, Collecting, CleaningUp or Done; ``result`` is set
    only when Done (PASS, FAIL or INCONCLUSIVE) and never changes after. ``gates``: each gate's
    verdict and reason ("PASS: ..."), the detail being in the evidence folder."""

    template: str | None = None
    host: str | None = None
    container: str | None = None
    url: str | None = None  # the run's service, as this process reaches it
    started_at: str | None = None
    finished_at: str | None = None
    # A run that executes as a job on its Host (``executor: host``): the runner container,
    # when the job last wrote its record, and when this reconciler last looked (an old
    # ``followed_at`` under way: no reconciler follows the job now; it runs on regardless).
    runner: str | None = None
    reported_at: str | None = None
    followed_at: str | None = None
    # Written ahead of creating the runner (the write-ahead record of its creation): from then
    # on the job may exist on its Host. A run launched without it never started anything, so
    # whoever holds its Host now (a restart, another replica) starts it, once.
    runner_claimed_at: str | None = None
    # Services the run adds streams to without owning them (a promotion's running version),
    # written before it adds any: a recovery deletes the run's noted streams there too (only
    # those: such a service's other streams are not the run's).
    foreign: list[str] | None = None

    def where(self, now: datetime | None = None) -> str:
        """``job on <Host>, reported 4s ago``; under way and not looked at for more than
        ``UNFOLLOWED_S``: ``not followed for 12m`` too (no reconciler follows it now). A run
        with its verdict says only where it ran: its last report is its end."""
        if not self.runner:
            return ""
        said = [f"job on {self.host}" if self.host else "job"]
        reported = seconds_since(self.reported_at, now)
        if reported is not None and self.result is None:
            said.append(f"reported {_age(reported)} ago")
        followed = seconds_since(self.followed_at, now)
        if self.result is None and followed is not None and followed > UNFOLLOWED_S:
            said.append(f"not followed for {_age(followed)}")
        return ", ".join(said)


UNFOLLOWED_S = 60.0  # a followed job is mirrored at least every 15 s


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


class FrozenRun(Facts):
    """What a run's record froze of its Experiment at launch (``applied_spec["experiment"]``)
    that following and recovering it need, read leniently: a record written by another
    version, or damaged, still recovers, with a default for what it lacks."""

    executor: str = "reconciler"
    budget_seconds: int = 1800
    cleanup_seconds: int = 300
    telemetry: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def frozen(cls, record: ResourceStatus | None) -> Self:
        spec = (record.applied_spec or {}).get("experiment") if record is not None else None
        if not isinstance(spec, dict):
            return cls()
        return cls.parse({k: v for k, v in spec.items() if k in _FROZEN_KEYS})


_FROZEN_KEYS = ("executor", "budgetSeconds", "cleanupSeconds", "telemetry")
