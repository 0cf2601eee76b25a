"""A small JSON-Schema-like checker for request bodies, transcribed from the published OpenAPI.

Why our own (stdlib) rather than ``jsonschema``: the emulator runs in a registry-free image that
holds only Debian's python3.11. Why schemas at all rather than hand-written ``if`` chains: the
real service validates every body with a pydantic model generated from the same definitions as
``rtvi-openapi.json`` (strict: unknown keys refused), and transcribing each component schema as
one declaration keeps the emulator's strictness auditable against the spec field by field.

Semantics follow JSON Schema 2020-12 as the spec uses it: ``integer`` excludes booleans (and
accepts integral floats such as ``2.0``), ``number`` excludes booleans, ``pattern`` is searched
(the spec's patterns are anchored), ``anyOf`` passes when one branch passes. A failed check raises
:class:`validation.Invalid` naming the field; handlers answer it with 422.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from emulators.rtvi.validation import Invalid

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$"
DESCRIPTION_PATTERN = r"^[A-Za-z0-9_.\-\"' ,]*$"
TIMESTAMP_PATTERN = r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{3})?Z$"


class Schema:
    """One node; ``check`` raises Invalid or returns None."""

    def check(self, value: object, where: str) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Text(Schema):
    max_len: int
    pattern: str | None = None
    min_len: int = 0
    uuid: bool = False  # "format": "uuid" (the service parses these as UUIDs)

    def check(self, value: object, where: str) -> None:
        if not isinstance(value, str):
            raise Invalid(f"{where}: expected a string")
        if not self.min_len <= len(value) <= self.max_len:
            raise Invalid(f"{where}: length out of range")
        if self.pattern is not None and re.search(self.pattern, value) is None:
            raise Invalid(f"{where}: does not match the required pattern")
        if self.uuid:
            try:
                uuid.UUID(value)
            except ValueError:
                raise Invalid(f"{where}: not a valid UUID") from None


@dataclass(frozen=True)
class Integer(Schema):
    low: float
    high: float

    def check(self, value: object, where: str) -> None:
        integral = isinstance(value, float) and math.isfinite(value) and value.is_integer()
        if isinstance(value, bool) or not (isinstance(value, int) or integral):
            raise Invalid(f"{where}: expected an integer")
        assert isinstance(value, int | float)
        if not self.low <= value <= self.high:
            raise Invalid(f"{where}: out of range")


@dataclass(frozen=True)
class Number(Schema):
    low: float = -math.inf
    high: float = math.inf

    def check(self, value: object, where: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise Invalid(f"{where}: expected a number")
        if not self.low <= value <= self.high:
            raise Invalid(f"{where}: out of range")


@dataclass(frozen=True)
class Boolean(Schema):
    def check(self, value: object, where: str) -> None:
        if not isinstance(value, bool):
            raise Invalid(f"{where}: expected a boolean")


@dataclass(frozen=True)
class Null(Schema):
    def check(self, value: object, where: str) -> None:
        if value is not None:
            raise Invalid(f"{where}: expected null")


@dataclass(frozen=True)
class Enum(Schema):
    values: tuple[object, ...]

    def check(self, value: object, where: str) -> None:
        if isinstance(value, bool) or value not in self.values:
            raise Invalid(f"{where}: not one of the allowed values")


@dataclass(frozen=True)
class Array(Schema):
    items: Schema
    max_items: int
    min_items: int = 0

    def check(self, value: object, where: str) -> None:
        if not isinstance(value, list):
            raise Invalid(f"{where}: expected a list")
        if not self.min_items <= len(value) <= self.max_items:
            raise Invalid(f"{where}: number of items out of range")
        for index, item in enumerate(value):
            self.items.check(item, f"{where}[{index}]")


@dataclass(frozen=True)
class AnyOf(Schema):
    options: tuple[Schema, ...]

    def check(self, value: object, where: str) -> None:
        first: Invalid | None = None
        for option in self.options:
            try:
                option.check(value, where)
                return
            except Invalid as exc:
                first = first or exc
        assert first is not None
        raise first


@dataclass(frozen=True)
class Object(Schema):
    properties: Mapping[str, Schema]
    required: tuple[str, ...] = ()
    extra: bool = False  # additionalProperties
    extra_values: Schema | None = None  # additionalProperties as a schema

    def check(self, value: object, where: str) -> None:
        if not isinstance(value, dict):
            raise Invalid(f"{where}: expected an object")
        for key in self.required:
            if key not in value:
                raise Invalid(f"{where}.{key}: field required")
        unknown = sorted(key for key in value if key not in self.properties)
        if unknown and not self.extra and self.extra_values is None:
            raise Invalid(f"{where}: extra fields not permitted: {', '.join(unknown)}")
        for key, item in value.items():
            schema = self.properties.get(key, self.extra_values)
            if schema is not None:
                schema.check(item, f"{where}.{key}")


@dataclass(frozen=True)
class AnyValue(Schema):
    def check(self, value: object, where: str) -> None:
        return None


def nullable(schema: Schema) -> Schema:
    return AnyOf((schema, Null()))


def text(max_len: int, pattern: str | None = None) -> Text:
    """A string of at most ``max_len``; the spec's ``^(.|\\n)*$`` pattern is ``None`` here."""
    return Text(max_len, pattern)


UUID = Text(36, None, 36, uuid=True)
FREE_OBJECT = Object({}, extra=True)
TIMESTAMP = Text(24, TIMESTAMP_PATTERN, 24)
IDENTIFIER = Text(256, IDENTIFIER_PATTERN, 1)


def json_body(raw: object, schema: Schema) -> dict[str, object]:
    """Check a parsed JSON body; returns it typed as an object."""
    schema.check(raw, "body")
    assert isinstance(raw, dict)
    return raw


def boolean_query(values: list[str] | None, name: str) -> bool | None:
    """A boolean query parameter as FastAPI parses it (``true/false/1/0/yes/no/on/off``)."""
    if not values:
        return None
    raw = values[-1].strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise Invalid(f"query.{name}: expected a boolean")


def uuid_param(value: str, name: str) -> str:
    """A ``format: uuid`` path or query parameter in canonical form; 422 when malformed."""
    UUID.check(value, name)
    return str(uuid.UUID(value))
