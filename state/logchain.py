"""The structured log line every process of ours writes: JSON, timestamped, and scrubbed of
every registered secret as the last step before it is rendered.

Why one chain: the reconciler logs to its state directory and a run's job logs to its
container's output on a Host; were each to set its own processors, a redaction step could be
dropped from one of them without anyone noticing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TextIO

import structlog

from state.redaction import DEFAULT_REDACTOR


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    scrubbed: dict[str, Any] = DEFAULT_REDACTOR.scrub(dict(event_dict))
    return scrubbed


class Tee:
    """Write log lines to several streams. A line that cannot be written (a full or read-only
    disk, a closed stream) is dropped and ``failed(stream, error)`` told: a failure to log is
    never fatal, least of all while logging why a thread died."""

    def __init__(self, streams: list[TextIO],
                 failed: Callable[[TextIO, OSError], None] | None = None) -> None:
        self.streams = streams
        self.failed = failed

    def write(self, text: str) -> None:
        for stream in self.streams:
            try:
                stream.write(text)
                stream.flush()
            except OSError as exc:
                if self.failed is not None:
                    self.failed(stream, exc)
            except ValueError:  # closed at shutdown
                pass

    def flush(self) -> None:
        for stream in self.streams:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def configure(stream: TextIO | Tee) -> None:
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
        logger_factory=structlog.PrintLoggerFactory(file=stream),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
