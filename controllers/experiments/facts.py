"""What an Experiment's record says about its run (``ResourceStatus.facts``; see
``controllers.facts``)."""

from __future__ import annotations

from pydantic import Field

from controllers.facts import Facts
from state.evidence import Verdict


class ExperimentStatusFacts(Facts):
    """An Experiment: the run it stands for, where it is, and (once terminal) its verdict.

    ``phase`` is Pending, Preflight, Running, Collecting, CleaningUp or Done; ``result`` is set
    only when Done (PASS, FAIL or INCONCLUSIVE) and never changes after. ``gates``: each gate's
    verdict and reason ("PASS: ..."), the detail being in the evidence folder."""

    run_id: str | None = None
    phase: str | None = None
    result: Verdict | None = None
    reason: str | None = None
    template: str | None = None
    host: str | None = None
    container: str | None = None
    url: str | None = None  # the run's service, as this process reaches it
    evidence: str | None = None  # the run's evidence folder
    started_at: str | None = None
    finished_at: str | None = None
    gates: dict[str, str] = Field(default_factory=dict)
    # A run that executes as a job on its Host (``executor: host``): the runner container,
    # when the job last wrote its record, and when this reconciler last looked (an old
    # ``followed_at`` under way: no reconciler follows the job now; it runs on regardless).
    runner: str | None = None
    reported_at: str | None = None
    followed_at: str | None = None
