"""Structured logs (structlog, JSON lines) with secret redaction as the last step.

CLI commands write their human output themselves; structured logs go to a file in the state
directory (and to stderr with ``-v``), so a person's terminal stays readable while machines get
JSON. Every event passes the redactor before it is rendered.

The log file is state like any other: created 0600 (it names hosts and deployments) and opened
without following a link, so a symlink planted as ``reconciler.log`` is refused (StateError
naming it) instead of appending our logs to a file elsewhere.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from state import logchain
from state.atomic import DIR_MODE, ensure_dir, open_private, os_reason
from state.diskhealth import WRITES
from state.errors import StateError
from state.store import LOG_FILE_NAME


def tee(streams: list[TextIO], log_file: TextIO | None = None) -> logchain.Tee:
    """Log lines to ``streams`` (the state directory's log, and stderr when verbose); a line
    the log file cannot take is the state disk's failure (``state.diskhealth``)."""
    def failed(stream: TextIO, exc: OSError) -> None:
        if stream is log_file:
            WRITES.failed(LOG_FILE_NAME, exc)
    return logchain.Tee(streams, failed)


def open_log(state_dir: Path) -> TextIO:
    """``<state_dir>/reconciler.log`` for appending: 0600, never through a link."""
    try:
        ensure_dir(state_dir, DIR_MODE)
    except OSError as exc:
        raise StateError(f"cannot create state directory {state_dir}: {os_reason(exc)}") from None
    fd = open_private(state_dir / LOG_FILE_NAME)
    return os.fdopen(fd, "a", encoding="utf-8")


def configure(state_dir: Path | None, verbose: bool) -> None:
    """Route structlog to the state directory's log (and stderr when ``verbose``); StateError
    names the log file if it cannot be opened safely."""
    streams: list[TextIO] = []
    log_file = open_log(state_dir) if state_dir is not None else None
    if log_file is not None:
        streams.append(log_file)
    if verbose:
        streams.append(sys.stderr)
    logchain.configure(tee(streams, log_file))
