"""The key of a resource, ``Kind/name``: typed, so that a name is never taken for a key.

The work queue, the store, the event log, the kind registry and the hooks all speak in keys.
As plain strings they were split by hand in twenty places and built with f-strings in thirty;
a ``Key`` is made once, from its two parts (``Key("Deployment", "vlm")``) or from text read
back (``Key.parse("Deployment/vlm")``), and gives them back as ``.kind`` and ``.name``.

It is a ``str`` (the text ``Kind/name``): it serialises, sorts, hashes and prints as before, so
records, events and metrics keep their shape, while mypy refuses a plain string where a key is
wanted.
"""

from __future__ import annotations

import re

KIND_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
"""Spec names are DNS-label-like and run IDs allow ``_`` and ``.``; nothing else may reach
a path (a key names its state file). A leading dot is refused so a name can never be ``..``
or hide as a dotfile. The store checks raw text against the same rules."""


class InvalidKey(ValueError):
    """Text that is not ``Kind/name``."""


class Key(str):
    __slots__ = ()

    def __new__(cls, kind: str, name: str) -> Key:
        if not KIND_RE.match(kind):
            raise InvalidKey(f"invalid kind {kind!r} in a resource key")
        if ".." in name or not NAME_RE.match(name):
            raise InvalidKey(f"invalid name {name!r} in a resource key of kind {kind}")
        return super().__new__(cls, f"{kind}/{name}")

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        return (self.kind, self.name)

    @classmethod
    def parse(cls, text: str) -> Key:
        """``Kind/name`` text (a record's ``resource``, a CLI argument) as a key."""
        if isinstance(text, Key):
            return text
        kind, sep, name = text.partition("/")
        if not sep:
            raise InvalidKey(f"invalid resource {text!r}: expected 'Kind/name'")
        return cls(kind, name)

    @property
    def kind(self) -> str:
        return self.partition("/")[0]

    @property
    def name(self) -> str:
        return self.partition("/")[2]
