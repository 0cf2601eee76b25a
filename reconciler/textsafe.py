"""Text from outside made safe to print: secrets redacted, terminal control characters shown.

Every value printed for a person passes :func:`escape_control`: model IDs, container log lines,
condition messages and hand-edited state files are text from outside, and a raw ESC, CSI
(``\\x9b``) or OSC sequence in them would drive the reader's terminal (retitle it, clear it,
hide lines, forge colours), a bidi override would reorder what is shown, and an embedded newline
would forge a line that looks like another event. Control characters are shown as visible
escapes (``\\x1b``, ``\\n``) instead. Apart from ``reconciler.output`` (rich, the status
models) so that a command that only prints a line need not import them.
"""

from __future__ import annotations

import re

from specs.errors import INVISIBLE as _INVISIBLE
from specs.errors import visible
from state.redaction import DEFAULT_REDACTOR

UNSAFE_IN_LINE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_INVISIBLE}]")
"""C0 except tab, DEL, C1 (``\\x9b`` is a one-byte CSI) and the invisible reorderers."""

UNSAFE_IN_BLOCK = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]")
"""The same but newline, for multi-line text whose line structure is kept."""

UNSAFE_IN_JSON = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_INVISIBLE}]")
"""What may still be raw in encoded JSON (encoders escape C0 inside strings but leave DEL, C1
and bidi raw); the whitespace between JSON tokens is kept."""

def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escape_control(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every terminal control character shown as a visible escape.

    With ``keep_newlines`` a newline stays a line break (multi-line messages keep their shape);
    otherwise it becomes ``\\n`` so one record can never print as two.
    """
    return (UNSAFE_IN_BLOCK if keep_newlines else UNSAFE_IN_LINE).sub(visible, text)


def safe(text: object) -> str:
    """One line for a terminal: secrets redacted, control characters escaped."""
    return escape_control(DEFAULT_REDACTOR.scrub_text(str(text)))


def safe_block(text: object) -> str:
    """Like :func:`safe` but keeping line breaks, for multi-line messages."""
    return escape_control(DEFAULT_REDACTOR.scrub_text(str(text)), keep_newlines=True)


def safe_json(encoded: str) -> str:
    """Encoded JSON with secrets redacted and every control character still raw in it written as
    a ``\\uXXXX`` escape: still valid JSON that decodes to the same values."""
    return UNSAFE_IN_JSON.sub(_json_escape, DEFAULT_REDACTOR.scrub_text(encoded))
