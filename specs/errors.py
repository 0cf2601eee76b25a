"""Spec problems, reported as ``file:line:col: field: message (rule)``.

Every refusal the spec layer produces names the file, the line and the rule it enforces, so a
person can fix a spec without reading our code. Hierarchy:

- ``SpecIssue``   one problem (error or warning) at a location; plain data.
- ``SpecError``   exception carrying one or more error ``SpecIssue``s; raised by loading and
                  validation. Nothing is changed anywhere when it is raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Location:
    """Where something stands in a spec file (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        file = one_line(bounded(self.file, MAX_PATH_CHARS))  # folders a spec set may nest
        if self.line <= 0:  # the file as a whole (missing, unreadable): no position to give
            return file
        return f"{file}:{self.line}:{self.col}"


INVISIBLE = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
"""Bidi marks, embeddings, overrides and isolates (they reorder the rest of the line) and the
Unicode line/paragraph separators (some viewers break lines at them)."""
ZERO_WIDTH = ("\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2060-\u2064"
              "\u206a-\u206f\u3164\ufe00-\ufe0f\uffa0\ufeff\ufff9-\ufffb"
              "\U000e0000-\U000e007f\U000e0100-\U000e01ef")
"""Characters that draw nothing: zero-width space and joiners, the word joiner and invisible
operators, the soft hyphen, fillers (Hangul, Khmer, Mongolian), variation selectors, tag
characters, interlinear annotations and a stray byte-order mark. A path, URL or name that
holds one looks the same as one that does not. Free text may hold them (an emoji's joiner or
variation selector); one line of text may not."""
ODD_SPACE = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"
"""Spaces other than the ASCII one (no-break, en, em, thin, ideographic...): in a path or a
URL they pass for a plain space, or for nothing at all."""
UNSAFE_IN_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{INVISIBLE}{ZERO_WIDTH}{ODD_SPACE}]")
"""C0 (newline and tab too), DEL, C1 (``\\x9b`` is a one-byte CSI), the invisible reorderers,
the characters that draw nothing and the spaces that pass for another: what one line of
output must never carry raw."""
NAMED_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}


def visible(match: re.Match[str]) -> str:
    """The visible escape of one matched character (``\\n``, ``\\x1b``, ``\\u202e``)."""
    char = match.group()
    named = NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """``text`` with every control, separator and bidi character shown as a visible escape
    (``\\n``, ``\\x1b``, ``\\u202e``): it prints as one line, in the order it is written."""
    return UNSAFE_IN_LINE.sub(visible, text)


MAX_FIELD_CHARS = 200
MAX_PATH_CHARS = 300
MAX_MESSAGE_CHARS = 500


def bounded(text: str, limit: int) -> str:
    """``text`` in at most about ``limit`` characters: its start and its end (where a message
    says why), and how many were left out between. A message quotes what a spec says, and a
    spec may say 500 KB in one value (and alias it 999 times)."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    head = limit - tail
    return f"{text[:head]}[... {len(text) - limit} characters ...]{text[-tail:]}"


@dataclass(frozen=True)
class SpecIssue:
    """One problem found in a spec, with the rule that found it. Its field and message are
    bounded (``bounded``) and escaped (``one_line``): whatever a spec holds, one issue prints
    as one line of a few hundred bytes."""

    location: Location
    field: str
    message: str
    rule: str
    severity: Severity = "error"

    def __post_init__(self) -> None:
        # Bounded, then escaped: whatever a message quotes, it prints as one line of a few
        # hundred characters and never drives the reader's terminal.
        object.__setattr__(self, "field", one_line(bounded(self.field, MAX_FIELD_CHARS)))
        object.__setattr__(self, "message",
                           one_line(bounded(self.message, MAX_MESSAGE_CHARS)))

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        field = "" if self.field == "-" else f"{self.field}: "
        return f"{self.location}: {prefix}{field}{self.message} ({self.rule})"


class SpecError(Exception):
    """One or more spec errors; raised before anything is changed."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = [i for i in issues if i.severity == "error"]
        super().__init__("\n".join(str(i) for i in self.issues))
