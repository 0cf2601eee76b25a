"""Structured logs (structlog, JSON lines) with secret redaction as the last step.

CLI commands write their human output themselves; structured logs go to a file in the state
directory (and to stderr with ``-v``), so a person's terminal stays readable while machines get
JSON. Every event passes the redactor before it is rendered.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, TextIO

import structlog

from state.redaction import DEFAULT_REDACTOR

LOG_FILE_NAME = "reconciler.log"


def _redact(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    scrubbed: dict[str, Any] = DEFAULT_REDACTOR.scrub(dict(event_dict))
    return scrubbed


class _Tee:
    """Write log lines to several streams (file, and stderr when verbose)."""

    def __init__(self, streams: list[TextIO]) -> None:
        self.streams = streams

    def write(self, text: str) -> None:
        for stream in self.streams:
            stream.write(text)
            stream.flush()

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def configure(state_dir: Path | None, verbose: bool) -> None:
    streams: list[TextIO] = []
    if state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        streams.append((state_dir / LOG_FILE_NAME).open("a", encoding="utf-8"))
    if verbose:
        streams.append(sys.stderr)
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
        logger_factory=structlog.PrintLoggerFactory(file=_Tee(streams)),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
