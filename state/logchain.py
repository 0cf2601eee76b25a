"""The structured log line every process of ours writes: JSON, timestamped, and scrubbed of
every registered secret as the last step before it is rendered.

Why one chain: the reconciler logs to its state directory and a run's job logs to its
container's output on a Host; were each to set its own processors, a redaction step could be
dropped from one of them without anyone noticing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from state.redaction import DEFAULT_REDACTOR


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    scrubbed: dict[str, Any] = DEFAULT_REDACTOR.scrub(dict(event_dict))
    return scrubbed


def configure(stream: TextIO) -> None:
    """Route structlog's INFO and above to ``stream`` as redacted JSON lines."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
