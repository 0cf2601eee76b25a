"""The persisted shapes: resource status, conditions, history, inventory and events.

These are what ``reconciler status`` shows and what survives a restart, so they are strict
(``extra="forbid"``: a typo in a field name is a bug, not data) and JSON-only (times are ISO-8601
UTC strings, so files diff and grep cleanly).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from state.keys import Key

HISTORY_LIMIT = 50
"""Entries kept per resource; older ones drop off (events.jsonl keeps the long tail)."""

ConditionType = Literal["Ready", "Progressing", "Degraded", "Stalled"]
ConditionStatus = Literal["True", "False", "Unknown"]


def utc_now() -> str:
    """Current time as ISO-8601 UTC with milliseconds, e.g. ``2026-12-02T18:00:00.123Z``."""
    return stamp(datetime.now(UTC))


def stamp(moment: datetime) -> str:
    """``moment`` (aware, UTC) as the records write times."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Condition(BaseModel):
    """One observed aspect of a resource, Kubernetes-style.

    ``last_transition_time`` is when ``status`` last changed, not when the condition was last
    written: it answers "how long has this been broken".
    """

    model_config = ConfigDict(extra="forbid")

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: str


class HistoryEntry(BaseModel):
    """One action the reconciler took on a resource, with its cause and result."""

    model_config = ConfigDict(extra="forbid")

    time: str
    action: str
    target: str
    cause: str
    result: Literal["ok", "error"]
    detail: str = ""
    revision: str | None = None


class InventoryItem(BaseModel):
    """An external object (container, stream, sensor) that we created and therefore own.

    ``pending`` is the write-ahead record: it is saved *before* the object is created, so a
    crash between "created" and "recorded" leaves a trace the next pass can resolve (look the
    object up by its deterministic name or ID, adopt or delete it). ``created`` means the object
    was confirmed and ``id`` is known.
    """

    model_config = ConfigDict(extra="forbid")

    kind: str
    name: str
    host: str
    id: str | None = None
    state: Literal["pending", "created"] = "pending"
    created_at: str


class ResourceStatus(BaseModel):
    """Everything the reconciler knows about one resource (``Kind/name``)."""

    model_config = ConfigDict(extra="forbid")

    resource: str
    kind: str
    name: str
    observed_generation: str | None = None
    desired_generation: str | None = None
    applied_revision: str | None = None
    source_file: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    history: list[HistoryEntry] = Field(default_factory=list)
    inventory: list[InventoryItem] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict)
    applied_spec: dict[str, Any] | None = None
    # What a person asked of this resource (``reconciler promote``: approve a held candidate,
    # qualify it again), kept until its kind acts on it; its kind judges what it accepts.
    requests: dict[str, str] = Field(default_factory=dict)
    updated_at: str = ""

    @property
    def key(self) -> Key:
        return Key(self.kind, self.name)

    def condition(self, type: ConditionType) -> Condition | None:
        """The condition of ``type``, or None if it was never set."""
        for cond in self.conditions:
            if cond.type == type:
                return cond
        return None

    def set_condition(
        self,
        type: ConditionType,
        status: ConditionStatus,
        reason: str,
        message: str = "",
        now: str | None = None,
    ) -> bool:
        """Set a condition; return True if anything about it changed.

        The transition time moves only when ``status`` changes, so a resource that stays
        unhealthy for an hour while its message is refreshed still says since when.
        """
        stamp = now if now is not None else utc_now()
        current = self.condition(type)
        if current is None:
            self.conditions.append(
                Condition(
                    type=type,
                    status=status,
                    reason=reason,
                    message=message,
                    last_transition_time=stamp,
                )
            )
            return True
        changed = False
        if current.status != status:
            current.status = status
            current.last_transition_time = stamp
            changed = True
        if current.reason != reason:
            current.reason = reason
            changed = True
        if current.message != message:
            current.message = message
            changed = True
        return changed

    def add_history(self, entry: HistoryEntry, limit: int = HISTORY_LIMIT) -> None:
        """Append ``entry`` (newest last) and keep only the newest ``limit`` entries."""
        self.history.append(entry)
        if limit >= 0 and len(self.history) > limit:
            del self.history[: len(self.history) - limit]

    def inventory_item(self, kind: str, name: str) -> InventoryItem | None:
        """The inventory entry for ``(kind, name)``, or None."""
        for item in self.inventory:
            if item.kind == kind and item.name == name:
                return item
        return None

    def upsert_inventory(self, item: InventoryItem) -> None:
        """Insert ``item`` or replace the entry with the same ``(kind, name)``."""
        for index, existing in enumerate(self.inventory):
            if existing.kind == item.kind and existing.name == item.name:
                self.inventory[index] = item
                return
        self.inventory.append(item)

    def remove_inventory(self, kind: str, name: str) -> None:
        """Drop the entry for ``(kind, name)``; no error if there is none."""
        self.inventory = [
            item for item in self.inventory if not (item.kind == kind and item.name == name)
        ]


class Event(BaseModel):
    """One line of ``events.jsonl``: something that happened to a resource."""

    model_config = ConfigDict(extra="forbid")

    seq: int
    time: str
    resource: str
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


OWNER_ID_RE = r"^[0-9a-f]{32}$"
"""A state directory's owner ID: 128 random bits as lowercase hex (``uuid4().hex``)."""


class Owner(str):
    """A reconciler instance name that also carries the owner ID of its state directory.

    Two state directories may use the same instance name (two people, one shared engine), so
    the name alone cannot tell whose a container is; the owner ID, recorded once per directory
    in ``instance.json``, can. It is a ``str`` so every place that only needs the name
    (container names, stream IDs, sensor names, log fields) keeps working unchanged, while
    ``controllers.ownership`` reads :attr:`owner_id` to label what we create and to refuse what
    another directory created. A plain ``str`` instance has no owner ID: ownership then judges
    by the name alone, as before owner IDs existed.
    """

    owner_id: str

    def __new__(cls, name: str, owner_id: str) -> Owner:
        value = super().__new__(cls, name)
        value.owner_id = owner_id
        return value

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        """Pickle/copy with the owner ID (a plain str would lose it)."""
        return str(self), self.owner_id
