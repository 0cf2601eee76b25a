"""What a Deployment's record says about it (``ResourceStatus.facts``; see
``controllers.facts``): where it runs, in which container, serving what, and what the model
server said of itself."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from controllers.facts import EngineFacts, Facts


class RuntimeFacts(Facts):
    """What the model server said about itself in its logs (rule 11); absent = not said.

    Keys are snake_case on disk as the log parser names them
    (``controllers.kinds.deployment.runtime_facts``)."""

    model_config = ConfigDict(alias_generator=None)

    precision: str | None = None
    max_model_len: str | None = None
    kv_cache_dtype: str | None = None
    mode: str | None = None
    gpu_memory_utilization: str | None = None
    max_num_seqs: str | None = None
    max_num_batched_tokens: str | None = None
    enable_prefix_caching: str | None = None
    mm_processor_cache_gb: str | None = None
    preprocess_workers: str | None = None


QUALIFYING, REJECTED, PROMOTED = "Qualifying", "Rejected", "Promoted"
BAKING, ROLLED_BACK = "Baking", "RolledBack"
SHOWN_PHASES = (QUALIFYING, REJECTED, BAKING, ROLLED_BACK)  # PROMOTED: the running version
ACCEPTED_KEPT = 8


class PromotionFacts(Facts):
    """Where this Deployment's latest candidate stands (``spec.promotion``): ``phase`` is
    Qualifying (its run measures it), Rejected (the running version serves on; ``reason``
    names each failed gate with both numbers), Baking (it runs now, watched until
    ``bake_until``), Promoted (it runs now) or RolledBack (it failed its bake: the version it
    replaced runs again, and ``reason`` says why)."""

    phase: str
    candidate: str  # the Deployment's spec hash it is
    run: str  # the qualification run's ID
    image: str | None = None
    reason: str | None = None
    evidence: str | None = None  # the qualification's bundle
    since: str | None = None
    promoted_from: str | None = None  # the image (and spec) it replaced
    # While Baking: the spec it replaced (a rollback recreates it) and until when it is watched.
    previous_spec: dict[str, Any] | None = None
    bake_until: str | None = None
    # A promotion's switch: seconds from the old container's stop to the candidate serving.
    gap_seconds: float | None = None
    # While Baking, its live numbers (``bake``): the resources that read a latency of it,
    # the median they read of the version it replaced, the limit, and the looks in a row over.
    live_watched: list[str] | None = None
    live_before_ms: float | None = None
    live_limit_ms: float | None = None
    live_over: int | None = None


class DeploymentStatusFacts(EngineFacts):
    """A Deployment: where it runs, in which container, serving what, since when."""

    host: str | None = None
    container: str | None = None
    container_id: str | None = None
    image: str | None = None
    image_id: str | None = None
    image_digest: str | None = None  # the registry digest it runs (none: built on the Host)
    url: str | None = None
    model: str | None = None
    runtime: RuntimeFacts | None = None
    ready_since: str | None = None
    promotion: PromotionFacts | None = None
    # The qualification run that promoted each version (its spec hash → run ID), the latest
    # last and at most ``ACCEPTED_KEPT``: a ``baseline: lastAccepted`` reads the running
    # version's numbers there (one rolled back to included).
    accepted: dict[str, str] | None = None

    def refuses(self, request: str, value: str) -> str | None:
        """``approve`` (its held candidate's run ID: let it through once) and ``rerun`` (qualify
        it again), only while a candidate is held out; ``value`` names that candidate's run."""
        found = self.promotion
        if request not in ("approve", "rerun"):
            return f"a Deployment takes approve or rerun, not {request}"
        if found is None or found.phase != REJECTED:
            now = f"its candidate is {found.phase.lower()}" if found is not None else (
                "it has no candidate (no spec.promotion, or nothing changed)")
            return f"nothing is held out to {request}: {now}"
        if value and value != found.run:
            return (f"run {value} is not the held candidate's: that is {found.run} "
                    f"({found.reason or 'no reason recorded'})")
        return None

    def holds(self, wanted: str) -> bool:
        """The spec asks for a candidate that is being qualified, was rejected or was rolled
        back: the running version serves on, on purpose, and for as long as it takes (a
        rejected candidate is held until a new commit). What uses the service goes on."""
        found = self.promotion
        return found is not None and found.candidate == wanted and found.phase in (
            QUALIFYING, REJECTED, ROLLED_BACK)

    def shown_phase(self) -> str:
        """A candidate being qualified, or held out (a promoted one is the running version)."""
        found = self.promotion
        if found is None or found.phase not in SHOWN_PHASES:
            return ""
        return f"candidate {found.phase.lower()}"
