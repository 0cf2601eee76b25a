"""Every kind the reconciler knows, registered once in dependency order.

``REGISTRY`` is what the daemon, the engine and the CLI iterate; a new kind is one more
``register`` call here (or, in a test, a toy kind registered for the test's duration).
"""

from __future__ import annotations

from reconciler.kinds.contract import (
    Hooks,
    Kind,
    NoHooks,
    Outcome,
    PassContext,
    ResourcePlan,
    Result,
    SpecResource,
    done,
    guarded,
    key_of,
    recheck,
    retry,
    stopped,
    terminal,
    wait,
)
from reconciler.kinds.deployment import DeploymentKind
from reconciler.kinds.experiment import ExperimentKind
from reconciler.kinds.host import HostKind
from reconciler.kinds.registry import Registry, RegistryError
from reconciler.kinds.services import Services
from reconciler.kinds.streamset import StreamSetKind
from specs.models import KINDS

REGISTRY = Registry()
for _kind in (HostKind(), DeploymentKind(), StreamSetKind(), ExperimentKind()):
    REGISTRY.register(_kind, KINDS)

__all__ = ["REGISTRY", "Hooks", "Kind", "NoHooks", "Outcome", "PassContext", "Registry",
           "RegistryError", "ResourcePlan", "Result", "Services", "SpecResource", "done",
           "guarded", "key_of", "recheck", "retry", "stopped", "terminal", "wait"]
