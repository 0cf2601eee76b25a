"""Replacement of known secret values in anything we persist or print.

Specs reference secrets; their values are resolved at the moment of use and must never reach
status files, events, logs, plans or evidence. Controllers register every value they resolve
with the process-wide :data:`DEFAULT_REDACTOR`; every writer in this package scrubs through it
before bytes touch the disk. This is a safety net behind "never pass secrets to writers", not a
substitute for it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

MASK = "***REDACTED***"
"""What a secret value is replaced with."""

MIN_SECRET_LEN = 4
"""Values shorter than this are not registered.

Replacing a 1-3 character value everywhere would mangle ordinary text (imagine the secret
``"1"`` or ``"on"``) and, worse, the pattern of masks would reveal where the short value
occurs; such a value is not a secret worth the name anyway.
"""

GO_SHORT_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                    "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}
"""Go's ``strconv.Quote`` short escapes (Docker and runc quote values with ``%q``)."""

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def redact_urls(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it removed: the one policy for
    URLs shown anywhere (Git remotes, RTSP sources, services, their echoed errors). The user
    goes too: an account name is half a credential, and no message needs it."""
    return _URL_USERINFO.sub(r"\g<scheme>", text)


FIRST_PRINTABLE_ASCII = 0x20
ASCII_DEL = 0x7F
ASCII_LIMIT = 0x80
BMP_LIMIT = 0x10000


def go_quoted(value: str, ascii_only: bool = False) -> str:
    """The inside of Go's ``%q`` (``%+q`` with ``ascii_only``) of ``value``, without quotes.

    Docker's errors quote the offending ``KEY=value`` this way (``"HF_TOKEN=ab\\x00c"``): a
    value with a NUL or a quote would slip past a scrubber that only knows its raw form.
    """
    out: list[str] = []
    for char in value:
        code = ord(char)
        if char in GO_SHORT_ESCAPES:
            out.append(GO_SHORT_ESCAPES[char])
        elif char.isprintable() and (code < ASCII_LIMIT or not ascii_only):
            out.append(char)
        elif code < FIRST_PRINTABLE_ASCII or code == ASCII_DEL:
            out.append(f"\\x{code:02x}")
        elif code < BMP_LIMIT:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def _json_inner(value: str, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)[1:-1]


ENCODERS: tuple[Callable[[str], str], ...] = (
    lambda v: _json_inner(v, True),
    lambda v: _json_inner(v, False),
    lambda v: repr(v)[1:-1],
    lambda v: ascii(v)[1:-1],
    go_quoted,
    lambda v: go_quoted(v, ascii_only=True),
)
"""How a value gets escaped on its way into a message: JSON (ASCII and UTF-8), Python
``repr``/``ascii``, Go ``%q``/``%+q``."""


def encoded_forms(value: str) -> set[str]:
    """Every way ``value`` may appear in a message: raw, once encoded by each of ``ENCODERS``,
    and twice — a quoted error message is itself often carried inside JSON or a ``repr`` (status
    ``-o json``, an API answer, a log line) by the time it is printed."""
    once = {value} | {encode(value) for encode in ENCODERS}
    return once | {encode(form) for form in once for encode in ENCODERS}


class Redactor:
    """A thread-safe set of secret values and a scrubber that masks them.

    Each value is matched in every encoded form (:func:`encoded_forms`), longest first, so a
    secret that contains another registered secret is masked whole instead of leaving its
    remainder visible, and a quoted or escaped copy is masked like the raw one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._forms: set[str] = set()
        self._ordered: tuple[str, ...] = ()

    def register(self, value: str) -> None:
        """Remember ``value`` as a secret; values shorter than ``MIN_SECRET_LEN`` are ignored."""
        if len(value) < MIN_SECRET_LEN:
            return
        with self._lock:
            if value in self._values:
                return
            self._values.add(value)
            self._forms |= encoded_forms(value)
            self._ordered = tuple(sorted(self._forms, key=len, reverse=True))

    @property
    def values_count(self) -> int:
        """How many distinct secret values are registered."""
        with self._lock:
            return len(self._values)

    def scrub_text(self, text: str) -> str:
        """Return ``text`` with every registered value replaced by ``MASK``."""
        ordered = self._ordered  # an immutable snapshot; reading the attribute is atomic
        for value in ordered:
            if value in text:
                text = text.replace(value, MASK)
        return text

    def scrub(self, obj: Any) -> Any:
        """Scrub strings recursively through dicts (keys and values), lists and tuples.

        Other values (numbers, booleans, None, ...) are returned unchanged.
        """
        if isinstance(obj, str):
            return self.scrub_text(obj)
        if isinstance(obj, dict):
            return {self.scrub(key): self.scrub(val) for key, val in obj.items()}
        if isinstance(obj, list):
            return [self.scrub(item) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.scrub(item) for item in obj)
        return obj


DEFAULT_REDACTOR = Redactor()
"""The process-wide redactor: register resolved secrets here, writers scrub through it."""
