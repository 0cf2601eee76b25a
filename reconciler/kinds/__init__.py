"""Every kind the reconciler knows, registered once in dependency order.

``REGISTRY`` is what the daemon, the engine and the CLI iterate, made from the one table of
kinds (``specs.kinds.KINDS``: a new kind is its folder and one line there), or, in a test, a toy
kind registered for the test's duration.
"""

from __future__ import annotations

from controllers.contract import (
    AnyKind,
    AnyPlan,
    Hooks,
    Kind,
    NoHooks,
    Outcome,
    PassContext,
    Report,
    ResourcePlan,
    Result,
    done,
    guarded,
    key_of,
    recheck,
    retry,
    stopped,
    terminal,
    wait,
)
from controllers.services import Services
from reconciler.kinds.registry import Registry, RegistryError
from specs.kinds import KINDS, load
from specs.models import SpecResource

REGISTRY = Registry()
REGISTRY.register_all([load(entry.controller)() for entry in KINDS])

__all__ = ["REGISTRY", "AnyKind", "AnyPlan", "Hooks", "Kind", "NoHooks", "Outcome",
           "PassContext", "Registry", "RegistryError", "Report", "ResourcePlan", "Result",
           "Services", "SpecResource", "done", "guarded", "key_of", "recheck", "retry",
           "stopped", "terminal", "wait"]
