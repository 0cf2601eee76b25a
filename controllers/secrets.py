"""Resolve secret references at the moment of use.

Values go straight into a container-create call and into the process-wide redactor (so any
log, event or error that later mentions them is scrubbed); they are never returned to callers
that store or print things.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from controllers.errors import SecretUnavailable
from specs.models import SecretRef
from state.redaction import DEFAULT_REDACTOR, Redactor


def resolve(ref: SecretRef, environ: Mapping[str, str] | None = None,
            redactor: Redactor = DEFAULT_REDACTOR) -> str:
    """Return the value of one reference and register it for redaction."""
    env = os.environ if environ is None else environ
    if ref.fromEnv is not None:
        value = env.get(ref.fromEnv)
        if value is None:
            raise SecretUnavailable(f"secret {ref.name}: environment variable {ref.fromEnv} is "
                                    "not set in the reconciler's environment")
    elif ref.fromFile is not None:
        try:
            value = Path(ref.fromFile).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise SecretUnavailable(f"secret {ref.name}: cannot read {ref.fromFile}: "
                                    f"{exc.strerror}") from exc
    else:
        raise SecretUnavailable(f"secret {ref.name}: no source given")
    if not value:
        raise SecretUnavailable(f"secret {ref.name}: the referenced value is empty")
    redactor.register(value)
    return value


def resolve_all(refs: list[SecretRef], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    return {ref.name: resolve(ref, environ) for ref in refs}
