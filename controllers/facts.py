"""What each kind records about itself in ``ResourceStatus.facts``, as typed models.

A record's ``facts`` is kept on disk as a plain JSON object (camelCase keys, so ``status --json``
and files read the same as before), but nothing of ours reads or writes it as a dict: every kind
goes through its model (``controllers/<kind>/facts.py``, on this base), so a misspelt key or a
wrong type is a mypy error, not a silent ``None`` three releases later, and defaults live in
one place.

Reading is forgiving on purpose. Facts are observations, never the only copy of something we
own (that is the inventory): a record written by an older version, or edited by hand, may hold a
key we no longer know or a value of the wrong type. :meth:`Facts.of` drops exactly the offending
keys and keeps the rest — a bad fact is an unknown fact, never a crash of the pass that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from specs.kinds import entry, load
from state.models import ResourceStatus


class Facts(BaseModel):
    """Base of every kind's facts: camelCase on disk, strict about unknown keys when written."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              validate_assignment=True, defer_build=True)  # built on first use

    # The fact ``status NAME`` shows as a table (not a line), and its (row key, header) columns.
    TABLE: ClassVar[str | None] = None
    TABLE_COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def for_kind(cls, kind: str) -> type[Facts] | None:
        """The facts model of ``kind``'s records, if its line of the table of kinds names one
        (imported only now: ``status`` loads neither the spec models nor every kind's facts
        to show one record)."""
        declared = entry(kind)
        if declared is None or not declared.facts:
            return None
        found = load(declared.facts)
        return found if isinstance(found, type) and issubclass(found, Facts) else None

    def table(self, now: datetime | None = None) -> list[dict[str, str]]:
        """The rows of the ``TABLE`` fact, shown by ``status NAME`` (none by default)."""
        return []

    def shown_phase(self) -> str:
        """The phase ``status`` shows in its PHASE column ("" by default): a run's, or a
        Deployment's candidate being qualified or held."""
        return ""

    def refuses(self, request: str, value: str) -> str | None:
        """Why this resource cannot take what a person asks of it (``reconciler promote``),
        or None: it can. By default it takes nothing."""
        return f"it takes no {request} request"

    def where(self, now: datetime | None = None) -> str:
        """Where a run-once resource's work executes and how well it is followed, for the
        ``status`` table ("" by default: it executes in the reconciler)."""
        return ""

    def holds(self, wanted: str) -> bool:
        """Whether the resource serves, on purpose, another version than its spec (of hash
        ``wanted``) asks for, and serves it well: its dependents go on against what serves
        instead of waiting for it to converge (a Deployment holding out a candidate while
        the version it runs serves on). False by default."""
        return False

    def live(self) -> list[LiveSignal]:
        """What this resource measures live of the service it uses (a StreamSet: each
        source's caption latency), read by that service's kind while a promotion of it bakes
        (none by default)."""
        return []

    @classmethod
    def parse(cls, raw: object) -> Self:
        """Validate ``raw``; keys that are unknown or of the wrong type are dropped, not fatal."""
        data = dict(raw) if isinstance(raw, dict) else {}
        for _ in range(len(data) + 1):
            try:
                return cls.model_validate(data)
            except ValidationError as exc:
                bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
                if not bad & set(data):
                    break
                for key in bad:
                    data.pop(key, None)
        return cls()

    @classmethod
    def of(cls, record: ResourceStatus | None) -> Self:
        """The facts of ``record`` (defaults for no record)."""
        return cls.parse(record.facts if record is not None else None)

    def merged(self, new: Self) -> Self:
        """These facts with those ``new`` sets (explicitly, even to None) taking their place:
        a step that learnt one thing about a source keeps what others learnt."""
        return self.model_copy(update={k: getattr(new, k) for k in new.model_fields_set})

    def put(self, record: ResourceStatus) -> None:
        """Store these facts in ``record`` (unset optional facts are left out of the file)."""
        record.facts = self.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass(frozen=True)
class LiveSignal:
    """One live reading a resource takes of the service it uses: ``what`` it is (``source
    red``), the latency it saw, and when (ISO 8601). Named in no kind: any kind's facts may
    give them (``Facts.live``), and the kind whose service they measure reads them."""

    what: str
    latency_ms: float | None
    at: str | None


class RunOutcome(Facts):
    """What any record of a run-once resource says of its run: which run, where it stands, and
    (once terminal) its verdict. An Experiment's facts are these and more; a kind that waits
    on a run it asked for (a Deployment on its qualification) reads these, never the rest."""

    run_id: str | None = None
    phase: str | None = None
    result: Literal["PASS", "FAIL", "INCONCLUSIVE"] | None = None
    reason: str | None = None
    evidence: str | None = None  # the run's evidence folder
    gates: dict[str, str] = Field(default_factory=dict)

    def shown_phase(self) -> str:
        return self.phase or ""


class EngineFacts(Facts):
    """What every record of something made on a Docker engine remembers: that engine's URL,
    so that it can be pruned after its Host's spec is gone (``Hosts.host_for``)."""

    docker_url: str | None = None


def seconds_since(stamp: str | None, now: datetime | None) -> float | None:
    if not stamp:
        return None
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ((now or datetime.now(UTC)) - then).total_seconds()


def age_text(stamp: str | None, now: datetime | None) -> str:
    seconds = seconds_since(stamp, now)
    return "" if seconds is None else f" ({seconds:.0f}s ago)"


def within(stamp: str | None, max_age: float | None, now: datetime | None) -> bool:
    seconds = seconds_since(stamp, now)
    if seconds is None or max_age is None:
        return seconds is not None
    return seconds <= max_age
