"""The spec set that sets every field (``data/every_field.yaml``), and how tests corrupt it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from specs.errors import SpecError
from specs.validate import parse_text

FIXTURE = Path(__file__).parent / "data" / "every_field.yaml"
DOCS: list[dict[str, Any]] = list(yaml.safe_load_all(FIXTURE.read_text()))
FieldPath = tuple[str | int, ...]


def changed(doc: int | str, path: FieldPath, value: Any) -> str:
    """The fixture's text with the value at ``path`` of document ``doc`` (its index, or its
    ``kind/name``) set to ``value``."""
    docs = copy.deepcopy(DOCS)
    if isinstance(doc, str):
        doc = next(i for i, d in enumerate(DOCS)
                   if f"{d['kind']}/{d['metadata']['name']}" == doc)
    node: Any = docs[doc]
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return yaml.safe_dump_all(docs, sort_keys=False)


def refusals(text: str) -> list[tuple[str, str, int]]:
    """(field, rule, line) of each refusal of ``text``; [] if it is accepted."""
    try:
        parse_text(text, "specs/hostile.yaml")
    except SpecError as exc:
        return [(i.field, i.rule, i.location.line) for i in exc.issues]
    return []


def refused_at(text: str, dotted: str) -> list[tuple[str, str, int]]:
    """The refusals of ``text``, asserting one is located at ``dotted`` (or inside it)."""
    found = refusals(text)
    assert any(f == dotted or f.startswith(dotted + ".") for f, _, line in found
               if line > 0), (dotted, found)
    return found
