"""Replacement of known secret values in anything we persist or print.

Specs reference secrets; their values are resolved at the moment of use and must never reach
status files, events, logs, plans or evidence. Controllers register every value they resolve
with the process-wide :data:`DEFAULT_REDACTOR`; every writer in this package scrubs through it
before bytes touch the disk. This is a safety net behind "never pass secrets to writers", not a
substitute for it.
"""

from __future__ import annotations

import threading
from typing import Any

MASK = "***REDACTED***"
"""What a secret value is replaced with."""

MIN_SECRET_LEN = 4
"""Values shorter than this are not registered.

Replacing a 1-3 character value everywhere would mangle ordinary text (imagine the secret
``"1"`` or ``"on"``) and, worse, the pattern of masks would reveal where the short value
occurs; such a value is not a secret worth the name anyway.
"""


class Redactor:
    """A thread-safe set of secret values and a scrubber that masks them.

    Values are matched longest first, so a secret that contains another registered secret is
    masked whole instead of leaving its remainder visible.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._ordered: tuple[str, ...] = ()

    def register(self, value: str) -> None:
        """Remember ``value`` as a secret; values shorter than ``MIN_SECRET_LEN`` are ignored."""
        if len(value) < MIN_SECRET_LEN:
            return
        with self._lock:
            if value in self._values:
                return
            self._values.add(value)
            self._ordered = tuple(sorted(self._values, key=len, reverse=True))

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
