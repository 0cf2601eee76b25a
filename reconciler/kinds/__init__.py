"""Every kind the reconciler knows, registered once in dependency order.

``REGISTRY`` is what the daemon, the engine and the CLI iterate; a new kind is one more
``register`` call here (or, in a test, a toy kind registered for the test's duration).
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
from controllers.deployment.kind import DeploymentKind
from controllers.experiments.kind import ExperimentKind
from controllers.host.kind import HostKind
from controllers.services import Services
from controllers.streamset.kind import StreamSetKind
from reconciler.kinds.registry import Registry, RegistryError
from specs.models import SpecResource

REGISTRY = Registry()
for _kind in (HostKind(), DeploymentKind(), StreamSetKind(), ExperimentKind()):
    REGISTRY.register(_kind)

__all__ = ["REGISTRY", "AnyKind", "AnyPlan", "Hooks", "Kind", "NoHooks", "Outcome",
           "PassContext", "Registry", "RegistryError", "Report", "ResourcePlan", "Result",
           "Services", "SpecResource", "done", "guarded", "key_of", "recheck", "retry",
           "stopped", "terminal", "wait"]
