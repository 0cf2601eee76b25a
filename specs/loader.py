"""Multi-document YAML loading that remembers where every value came from.

PyYAML's composer gives each node a start mark; we build plain Python data from the node tree
ourselves so that each field path maps to its ``file:line:col``. That is what lets a pydantic
error on ``spec.env.FOO`` point at the line a person wrote. Duplicate keys are refused (YAML
silently keeps the last one, which hides mistakes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specs.errors import Location, SpecError, SpecIssue

SPEC_SUFFIXES = (".yaml", ".yml")
PathKey = tuple[str | int, ...]


@dataclass
class Document:
    """One YAML document of a spec file: its data and the location of each field path."""

    file: str
    index: int
    data: Any
    marks: dict[PathKey, Location] = field(default_factory=dict)

    def locate(self, path: PathKey) -> Location:
        """Best location for a field path: the deepest known prefix (a missing field points at
        its parent mapping)."""
        for end in range(len(path), -1, -1):
            loc = self.marks.get(tuple(path[:end]))
            if loc is not None:
                return loc
        return Location(self.file, 1, 1)


def spec_files(paths: list[Path]) -> list[Path]:
    """Expand files and folders (recursively) into spec files, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES))
        elif path.exists():
            found.append(path)
        else:
            raise SpecError([SpecIssue(Location(str(path), 0, 0), "-", "no such file or folder",
                                       "input")])
    return found


def load_text(text: str, file: str) -> list[Document]:
    """Parse every document of one YAML text; raise SpecError on malformed YAML."""
    loader = yaml.SafeLoader(text)
    docs: list[Document] = []
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            doc = Document(file=file, index=index, data=None)
            doc.data = _build(loader, node, (), doc)
            if doc.data is not None:
                docs.append(doc)
            index += 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        raise SpecError([SpecIssue(Location(file, line, col), "-", str(problem),
                                   "yaml-syntax")]) from None
    finally:
        loader.dispose()
    return docs


def load_paths(paths: list[Path], relative_to: Path | None = None) -> list[Document]:
    """Load every document of every spec file under ``paths``; all syntax errors at once.

    ``relative_to`` names files relative to a root in messages (a Git checkout's files are
    reported as the repository path a person edits, not our snapshot folder).
    """
    docs: list[Document] = []
    issues: list[SpecIssue] = []
    for path in spec_files(paths):
        shown = str(path.relative_to(relative_to)) if relative_to is not None else str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            issues.append(SpecIssue(Location(shown, 0, 0), "-", str(exc), "input"))
            continue
        try:
            docs.extend(load_text(text, shown))
        except SpecError as exc:
            issues.extend(exc.issues)
    if issues:
        raise SpecError(issues)
    return docs


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: PathKey, doc: Document) -> Any:
    doc.marks[path] = Location(doc.file, node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            if not isinstance(key, str | int | float | bool):
                raise SpecError([SpecIssue(_loc(doc, key_node), _dotted(path),
                                           "mapping keys must be scalars", "yaml-syntax")])
            if key in result:
                raise SpecError([SpecIssue(_loc(doc, key_node), _dotted((*path, str(key))),
                                           "duplicate key", "yaml-duplicate-key")])
            result[key] = _build(loader, value_node, (*path, str(key)), doc)
            # A field's errors point at its key, where the person wrote the field's name.
            doc.marks[(*path, str(key))] = _loc(doc, key_node)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, (*path, i), doc) for i, item in enumerate(node.value)]
    return loader.construct_object(node)


def _loc(doc: Document, node: yaml.Node) -> Location:
    return Location(doc.file, node.start_mark.line + 1, node.start_mark.column + 1)


def _dotted(path: PathKey) -> str:
    return ".".join(str(p) for p in path) or "-"
