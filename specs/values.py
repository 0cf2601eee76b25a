"""One policy for every string and number a spec holds, applied from one place to every field.

A spec is written by whoever can push to the watched repository, and its strings travel far:
into container labels and environments, Docker and RTVI requests, status records, events, plans
and terminals. A raw control character there drives the reader's terminal (ESC, the one-byte
CSI ``\\x9b``), truncates (NUL) or forges a line (a newline inside a name prints as two
records); a bidi override or isolate reorders what a person reads (a name that displays as
``prod`` but is not). So every string of every spec model, wherever it sits (a field, a list
item, a map's key or value), is judged by ``string_findings``, which walks the validated model:
a field added later is judged without anyone remembering to. Only a field declared free text
(``free_text()``: a prompt, a reason, an environment value) may hold tab, newline and
carriage return; nothing may hold other C0/C1 controls, DEL, bidi controls or the Unicode
line and paragraph separators, and nothing but free text a zero-width character (a path that
holds one looks like one that does not). A refusal names the characters, never quotes the
value.

Numbers: every model refuses infinity and NaN (``Strict``'s ``allow_inf_nan=False``) and every
field states its bounds; what bounds cannot say, this walk refuses: a subnormal float
(``5e-324``), which no interval, rate or threshold means and which turns into infinity when
divided into.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import PydanticSerializationError

from specs.errors import INVISIBLE
from specs.errors import UNSAFE_IN_LINE as REFUSED_IN_LINE

REFUSED_IN_TEXT = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{INVISIBLE}]")
"""Free text keeps its whitespace controls: tab, newline, carriage return."""

R_STRING = "strings carry no control or bidi characters"
R_NUMBER = "numbers are finite, within bounds and not subnormal"
FREE_TEXT = "x-free-text"
"""The JSON Schema key that marks a free-text field (editors and the hostile-input sweep see
it too)."""

PathKey = tuple[str | int, ...]


def free_text(**kwargs: Any) -> Any:
    """A pydantic ``Field`` (same arguments) for free text: newline, tab and carriage return
    allowed in it (and escaped wherever it is printed), every other control refused."""
    return Field(json_schema_extra={FREE_TEXT: True}, **kwargs)


def named(chars: set[str]) -> str:
    """Characters named for a message (``U+001B``), in code point order: never the raw one."""
    return ", ".join(f"U+{ord(ch):04X}" for ch in sorted(chars))


def value_findings(model: BaseModel, screen: bool = True
                   ) -> Iterator[tuple[PathKey, str, str]]:
    """(path, message, rule) for every string or number in ``model`` (recursively) that breaks
    the policy. Screened first: a model whose JSON (pydantic's serializer, in Rust) holds no
    escape, no raw refused character and no tiny exponent holds nothing to refuse, and 10,000
    resources are screened in about 0.06 s where walking each costs 0.5 s. ``screen=False``
    for a model built through aliases: its JSON may be a thousand times its text."""
    if screen:
        try:
            encoded = model.__pydantic_serializer__.to_json(model).decode()
        except PydanticSerializationError:
            encoded = "\\"  # cannot screen: walk it
        if not ("\\" in encoded or "e-3" in encoded or REFUSED_IN_LINE.search(encoded)):
            return
    yield from _walk(model, ())


def _walk(model: BaseModel, path: PathKey) -> Iterator[tuple[PathKey, str, str]]:
    free = _free_fields(type(model))
    for name, value in model.__dict__.items():
        yield from _judge(value, (*path, name), name in free)


def _judge(value: Any, path: PathKey, text: bool) -> Iterator[tuple[PathKey, str, str]]:
    if isinstance(value, float):
        if value != 0 and abs(value) < sys.float_info.min:
            yield path, f"{value!r} is subnormal: too small to mean anything here", R_NUMBER
    elif isinstance(value, str):
        yield from _judge_text(value, path, text)
    elif isinstance(value, BaseModel):
        yield from _walk(value, path)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _judge(item, (*path, i), text)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and REFUSED_IN_LINE.search(key):
                yield (*path, key), (f"the key contains control, bidi or zero-width character(s) "
                                     f"{named(set(REFUSED_IN_LINE.findall(key)))}; a key is "
                                     "one line of text"), R_STRING
            yield from _judge(item, (*path, key), text)


@lru_cache(maxsize=16)  # small: it holds the strings (one may be 1 MB)
def _refused(value: str, text: bool) -> frozenset[str]:
    """The refused characters of ``value``: remembered, as one string reached through 999
    aliases is one object, scanned once."""
    return frozenset((REFUSED_IN_TEXT if text else REFUSED_IN_LINE).findall(value))


def _judge_text(value: str, path: PathKey, text: bool) -> Iterator[tuple[PathKey, str, str]]:
    found = _refused(value, text)
    if found:
        allowed = ("only tab, newline and carriage return are allowed in this free text"
                   if text else "this field is one line of text")
        yield path, (f"contains control, bidi or zero-width character(s) {named(set(found))} "
                     f"({len(value)} characters long); {allowed}"), R_STRING


_FREE: dict[type[BaseModel], frozenset[str]] = {}


def _free_fields(model: type[BaseModel]) -> frozenset[str]:
    """The names of ``model``'s free-text fields, found once per model class."""
    free = _FREE.get(model)
    if free is None:
        free = _FREE[model] = frozenset(
            name for name, info in model.model_fields.items()
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get(FREE_TEXT))
    return free
