"""Durable state of the reconciler: status, conditions, history, inventory, events, the lock.

Everything here survives ``kill -9``: whole files are replaced atomically, the event log is
append-only with fsync, and the single-writer lock is a kernel ``flock`` that dies with its
holder. Nothing is written before passing through the redactor. This package imports nothing
else of ours, so every other package may depend on it.
"""

from state.atomic import append_line_durable, write_atomic
from state.errors import CorruptState, LockHeld, StateError
from state.events import EventLog
from state.lock import StateLock
from state.models import (
    HISTORY_LIMIT,
    Condition,
    ConditionStatus,
    ConditionType,
    Event,
    HistoryEntry,
    InventoryItem,
    ResourceStatus,
    utc_now,
)
from state.redaction import DEFAULT_REDACTOR, MASK, Redactor
from state.store import Store

__all__ = [
    "DEFAULT_REDACTOR",
    "HISTORY_LIMIT",
    "MASK",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "CorruptState",
    "Event",
    "EventLog",
    "HistoryEntry",
    "InventoryItem",
    "LockHeld",
    "Redactor",
    "ResourceStatus",
    "StateError",
    "StateLock",
    "Store",
    "append_line_durable",
    "utc_now",
    "write_atomic",
]
