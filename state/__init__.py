"""Durable state of the reconciler: status, conditions, history, inventory, events, the lock.

Everything here survives ``kill -9``: whole files are replaced atomically, the event log is
append-only with fsync, and the single-writer lock is a kernel ``flock`` that dies with its
holder. Nothing is written before passing through the redactor. This package imports nothing
else of ours, so every other package may depend on it.

Names are imported on first use (PEP 562): ``import state.redaction`` must not pay for
pydantic models and watchfiles, so that a short CLI command starts fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "append_line_durable": "atomic", "write_atomic": "atomic",
    "CorruptState": "errors", "LockHeld": "errors", "StateError": "errors",
    "EventLog": "events", "StateLock": "lock",
    "HISTORY_LIMIT": "models", "Condition": "models", "ConditionStatus": "models",
    "ConditionType": "models", "Event": "models", "HistoryEntry": "models",
    "InventoryItem": "models", "ResourceStatus": "models", "utc_now": "models",
    "DEFAULT_REDACTOR": "redaction", "MASK": "redaction", "Redactor": "redaction",
    "Store": "store",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'state' has no attribute {name!r}")
    return getattr(importlib.import_module(f"state.{home}"), name)


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
