"""Multi-document YAML loading that remembers where every value came from, within limits.

PyYAML's composer gives each node a start mark; we build plain Python data from the node tree
ourselves so that each field path maps to its ``file:line:col``. That is what lets a pydantic
error on ``spec.env.FOO`` point at the line a person wrote. Duplicate keys are refused (YAML
silently keeps the last one, which hides mistakes).

Spec files are input a person (or an attacker with commit rights) controls, and the daemon
reads them unattended. So reading has limits (``LoaderLimits``), each refused in well under a
second with ``file:line:col`` and the limit's name: the file's size (a 50 MB file once took
2.8 GB to parse), YAML aliases and the values they expand to (a 10-level "billion laughs" took
46 s and 3.8 GB), and nesting depth (20,000 brackets blew Python's recursion limit). And a folder
is read whole or not at all: a sub-folder or file that cannot be read refuses the load, naming
the path, because skipping it would make its resources look deleted.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
import yaml.composer
import yaml.constructor
import yaml.reader
import yaml.resolver

from specs.errors import Location, SpecError, SpecIssue

SPEC_SUFFIXES = (".yaml", ".yml")
PathKey = tuple[str | int, ...]
# Editor by-products that never hold specs: vim swap/backup files and its write probe ("4913"),
# emacs lock (a dangling symlink) and autosave files, "name~" backups, JetBrains safe-write
# temporaries. Skipped by the loader and the folder watcher alike.
EDITOR_TEMP = re.compile(r"(\.sw[a-px]$)|(~$)|(^\.#)|(^#.*#$)|(^4913$)|(\.___jb_\w+___$)")
IGNORED_DIRS = frozenset({".git", ".hg", ".svn"})

# Rule names of refusals, as printed after each message.
R_INPUT = "input"
R_UNREADABLE = "unreadable"
R_NOT_REGULAR = "not-a-regular-file"
R_SYMLINK = "symlink-outside-folder"
R_SYNTAX = "yaml-syntax"
R_ENCODING = "encoding"
LIMIT_FILE_SIZE = "max-file-size"
LIMIT_ALIASES = "max-aliases"
LIMIT_NODES = "max-nodes"
LIMIT_DEPTH = "max-depth"
ENV_MAX_FILE_BYTES = "RECONCILER_MAX_SPEC_BYTES"
STR_TAG = "tag:yaml.org,2002:str"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
R_NUMBER_FORM = "numbers are written in plain decimal"
# What introduces a value in YAML: an implicit key's colon, an explicit key's "?", a flow
# item's comma or opening bracket, a block item's dash, a document's start or end.
VALUE_MARKS = (":", "?", ",", "[", "{", "- ", "-\n", "-\t", "---", "...")
_RESOLVE: Any = yaml.resolver.BaseResolver.resolve
PLAIN_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


@dataclass(frozen=True)
class LoaderLimits:
    """What one spec file may cost to read. The defaults leave room for any real spec (the
    largest example is a few KiB and a dozen levels deep) and stop hostile ones early."""

    max_file_bytes: int = 1024 * 1024
    max_aliases: int = 1000  # alias references (``*name``) per document
    max_nodes: int = 20_000  # values per file, counting every alias expansion
    max_depth: int = 64  # nesting of mappings and sequences

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> LoaderLimits:
        """Defaults, with the file size taken from ``RECONCILER_MAX_SPEC_BYTES`` when set."""
        env = os.environ if environ is None else environ
        raw = env.get(ENV_MAX_FILE_BYTES, "").strip()
        if not raw:
            return cls()
        if not raw.isdigit() or int(raw) <= 0:
            raise SpecError([SpecIssue(Location(ENV_MAX_FILE_BYTES, 0, 0), "-",
                                       f"must be a positive number of bytes, got {raw!r}",
                                       R_INPUT)])
        return cls(max_file_bytes=int(raw))


DEFAULT_LIMITS = LoaderLimits()


@dataclass
class Document:
    """One YAML document of a spec file: its data and the location of each field path."""

    file: str
    index: int
    data: Any
    # Line and column (1-based) of each field path: a pair, not a Location, as most are never
    # asked for (a file of 10,000 values makes as many marks).
    marks: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    # Whether an alias expanded in it: its values may then be far larger than its text (one
    # 500 KB string used 999 times), which a consumer that copies values must not assume.
    aliased: bool = False

    def locate(self, path: PathKey) -> Location:
        """Best location for a field path: the deepest known prefix (a missing field points at
        its parent mapping)."""
        for end in range(len(path), -1, -1):
            mark = self.marks.get(tuple(path[:end]))
            if mark is not None:
                return Location(self.file, *mark)
        return Location(self.file, 1, 1)


def _refusal(path: Path | str, message: str, rule: str) -> SpecIssue:
    return SpecIssue(Location(str(path), 0, 0), "-", message, rule)


def spec_files(paths: list[Path]) -> list[Path]:
    """Expand files and folders (recursively) into spec files, in a stable order.

    All or nothing: a folder that cannot be listed, a spec file that is not a regular file, or
    a symlink that leaves the folder refuses the whole set (SpecError naming every such path).
    Skipping it instead would make the resources it holds look deleted. A file named
    explicitly is taken as it is (the person chose it).
    """
    found, issues = _collect(paths)
    if issues:
        raise SpecError(issues)
    return found


def _collect(paths: list[Path]) -> tuple[list[Path], list[SpecIssue]]:
    found: list[Path] = []
    issues: list[SpecIssue] = []
    for path in paths:
        try:
            if path.is_dir():
                found.extend(_walk(path, issues))
            elif path.exists():
                found.append(path)
            else:
                issues.append(_refusal(path, "no such file or folder", R_INPUT))
        except OSError as exc:  # e.g. a parent folder we may not search
            issues.append(_refusal(path, f"cannot inspect: {exc.strerror or exc}",
                                   R_UNREADABLE))
    return sorted(found), issues


def _walk(root: Path, issues: list[SpecIssue]) -> list[Path]:
    """Spec files under ``root`` (iteratively: a deep tree cannot exhaust the stack)."""
    real_root = root.resolve()
    found: list[Path] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            issues.append(_refusal(folder, f"cannot read folder: {exc.strerror or exc}",
                                   R_UNREADABLE))
            continue
        for entry in entries:
            if not EDITOR_TEMP.search(entry.name):
                _sort_entry(entry, real_root, found, pending, issues)
    return found


def _sort_entry(entry: os.DirEntry[str], real_root: Path, found: list[Path],
                pending: list[Path], issues: list[SpecIssue]) -> None:
    """One folder entry: a spec file found, a folder to walk, or an issue naming it."""
    path = Path(entry.path)
    try:
        if entry.is_symlink():
            _check_link(path, real_root, found, issues)
        elif entry.is_dir(follow_symlinks=False) and path.suffix in SPEC_SUFFIXES:
            # A spec file replaced by a folder of its name (a checkout, a tool, a mistake):
            # walking it would find no resources and read them as deleted.
            issues.append(_refusal(path, "a folder named like a spec file: refused until it "
                                   "is a file again (its resources are kept meanwhile)",
                                   R_NOT_REGULAR))
        elif entry.is_dir(follow_symlinks=False):
            if entry.name not in IGNORED_DIRS:
                pending.append(path)
        elif path.suffix in SPEC_SUFFIXES:
            if not entry.is_file(follow_symlinks=False):
                issues.append(_refusal(path, "not a regular file", R_NOT_REGULAR))
            else:
                found.append(path)
    except OSError as exc:
        issues.append(_refusal(path, f"cannot inspect: {exc.strerror or exc}", R_UNREADABLE))


def _check_link(path: Path, real_root: Path, found: list[Path],
                issues: list[SpecIssue]) -> None:
    """A symlinked spec file is loaded when it stays inside the folder; one that leads out
    would let a spec folder pull in any file on this machine, so it is refused. Symlinked
    folders are not followed (they could loop, or duplicate every resource below them)."""
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        if path.suffix in SPEC_SUFFIXES:
            issues.append(_refusal(path, f"broken symlink: {exc}", R_UNREADABLE))
        return
    if target.is_dir():
        issues.append(_refusal(path, f"symlinked folder (to {target}) is not followed; move "
                               "the specs into the folder or name the target folder itself",
                               R_SYMLINK))
    elif path.suffix not in SPEC_SUFFIXES:
        return
    elif not target.is_relative_to(real_root):
        issues.append(_refusal(path, f"symlink points outside the folder {real_root} (to "
                               f"{target}); refused so that a spec folder cannot read other "
                               "files", R_SYMLINK))
    elif not target.is_file():
        issues.append(_refusal(path, "symlink to something that is not a regular file",
                               R_NOT_REGULAR))
    else:
        found.append(path)


def read_spec_bytes(path: Path, limits: LoaderLimits = DEFAULT_LIMITS,
                    shown: str | None = None) -> bytes:
    """The bytes of one spec file, or SpecError: not a regular file (a FIFO would block, a
    device never end), or larger than ``limits.max_file_bytes`` (checked before reading and
    again while reading, for a file that grows)."""
    name = shown or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecError([_refusal(name, f"cannot read: {exc.strerror or exc}",
                                  R_UNREADABLE)]) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError([_refusal(name, "not a regular file", R_NOT_REGULAR)])
        limit = limits.max_file_bytes
        if info.st_size > limit:
            raise SpecError([_too_big(name, info.st_size, limit)])
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise SpecError([_too_big(name, size, limit)])
        return b"".join(chunks)
    except OSError as exc:
        raise SpecError([_refusal(name, f"cannot read: {exc.strerror or exc}",
                                  R_UNREADABLE)]) from None
    finally:
        os.close(fd)


def _too_big(name: str, size: int, limit: int) -> SpecIssue:
    return SpecIssue(Location(name, 1, 1), "-",
                     f"file is {size} bytes, more than the limit of {limit} bytes (set "
                     f"{ENV_MAX_FILE_BYTES} to change it)", LIMIT_FILE_SIZE)


def decode_spec(data: bytes, file: str) -> str:
    """UTF-8 text of a spec file; a bad byte is refused at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError([SpecIssue(Location(file, line, col), "-",
                                   f"not UTF-8: {exc.reason} (byte 0x{data[exc.start]:02x})",
                                   R_ENCODING)]) from None


# libyaml's own nesting limit (1,000 levels), which its scanner can reach before our composer
# reaches ours: a flow nest on one line is read ahead to find where its keys end.
LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"


class _LimitExceeded(Exception):
    def __init__(self, mark: Any, message: str, rule: str) -> None:
        super().__init__(message)
        self.mark, self.message, self.rule = mark, message, rule


class _Limits:
    """A composer that counts aliases and nesting as it goes, so an alias bomb or a deep nest
    is refused before it costs memory or recursion. Mixed into a loader before its Composer."""

    limits: LoaderLimits
    depth = 0
    aliases = 0
    nodes = 0  # per file, not per document: many small documents add up
    built = 0  # values built from the nodes, aliases expanded, per file

    def compose_document(self) -> Any:
        self.aliases = 0
        return super().compose_document()  # type: ignore[misc]

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[attr-defined]
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > self.limits.max_aliases:
                raise _LimitExceeded(event.start_mark, f"more than {self.limits.max_aliases} "
                                     "alias references in one document", LIMIT_ALIASES)
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise _LimitExceeded(event.start_mark, f"more than {self.limits.max_nodes} values "
                                 "in one file", LIMIT_NODES)
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth:
                raise _LimitExceeded(event.start_mark, f"nested deeper than "
                                     f"{self.limits.max_depth} levels", LIMIT_DEPTH)
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self.depth -= 1


class _LimitedLoader(_Limits, yaml.SafeLoader):
    """The pure-Python loader, where libyaml is missing."""

    reader_counts_bytes = False  # a ReaderError's position is a character index

    def __init__(self, text: str, limits: LoaderLimits) -> None:
        super().__init__(text)
        self.limits = limits


_Loader: Any = _LimitedLoader
if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _LimitedCLoader(_Limits, yaml.composer.Composer, CParser,
                          yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """libyaml scans and parses (about 9x faster: 50 Deployments in 4 ms instead of
        35 ms, which a save waits for); composing stays in Python, so the limits above still
        see every event before a node is built. libyaml keeps its own stacks on the heap: a
        deep nest cannot overflow C's stack before the depth limit ends it."""

        reader_counts_bytes = True  # libyaml reads UTF-8: its ReaderError counts bytes

        def __init__(self, text: str, limits: LoaderLimits) -> None:
            CParser.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self.limits = limits

    _Loader = _LimitedCLoader

    class _PlainCLoader(CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """libyaml scans, parses and composes (about 7x faster than composing in Python:
        10,000 resources in 0.4 s instead of 2.5 s). Only for a text that cannot hold an alias
        (no ``&`` or ``*`` anywhere): its node tree is then exactly its values, so the builder
        applies the composer's limits itself (``_Builder.composed``)."""

        reader_counts_bytes = True
        built = 0

        def __init__(self, text: str, limits: LoaderLimits) -> None:
            CParser.__init__(self, text)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self.limits = limits
            self._tags: dict[tuple[Any, str, Any], str] = {}

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            """The resolver's tag, remembered per value: a spec set repeats its keys and many
            of its values (``apiVersion``, ``spec``, ``true``) thousands of times."""
            if kind is not yaml.ScalarNode:
                return _RESOLVE(self, kind, value, implicit)
            key = (kind, value, implicit)
            tag = self._tags.get(key)
            if tag is None:
                tag = self._tags[key] = _RESOLVE(self, kind, value, implicit)
            return tag


def _loader_for(text: str, limits: LoaderLimits) -> Any:
    """The loader for ``text``: libyaml's own composer where the text has no alias and too few
    marks to hold more values than the limit (it composes the whole file before anything
    counts: 500,000 values would cost 150 MB first), else the composer that counts as it
    goes. Every mapping entry (a key and its value) or sequence item is introduced by one of
    ``VALUE_MARKS``, and each introduces at most two values: that bounds them."""
    if _Loader is _LimitedLoader or "&" in text or "*" in text:
        return _Loader
    most = 2 + 2 * sum(text.count(m) for m in VALUE_MARKS)
    return _PlainCLoader if most <= limits.max_nodes else _Loader


def load_text(text: str, file: str, limits: LoaderLimits = DEFAULT_LIMITS) -> list[Document]:
    """Parse every document of one YAML text; raise SpecError on malformed YAML or a limit."""
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_file_bytes:
        raise SpecError([_too_big(file, len(text.encode("utf-8", "surrogatepass")),
                                  limits.max_file_bytes)])
    loader: Any = None
    try:
        loader = _loader_for(text, limits)(text, limits)
        return _documents(loader, file, limits)
    except (_LimitExceeded, yaml.YAMLError, UnicodeEncodeError) as exc:
        raise SpecError([_parse_issue(exc, text, file, limits, loader)]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _documents(loader: Any, file: str, limits: LoaderLimits) -> list[Document]:
    docs: list[Document] = []
    index = 0
    while loader.check_node():
        node = loader.get_node()
        if node is None:
            continue
        doc = Document(file=file, index=index, data=None)
        doc.data = _Builder(loader, doc, limits, composed=isinstance(loader, _Limits)
                            ).build(node, ())
        doc.aliased = isinstance(loader, _Limits) and loader.aliases > 0
        if doc.data is not None:
            docs.append(doc)
        index += 1
    return docs


def _parse_issue(exc: Exception, text: str, file: str, limits: LoaderLimits,
                 loader: Any) -> SpecIssue:
    """Where and why a text could not be parsed, located as well as the parser allows."""
    if isinstance(exc, _LimitExceeded):
        line, col = (exc.mark.line + 1, exc.mark.column + 1) if exc.mark else (1, 1)
        return SpecIssue(Location(file, line, col), "-", exc.message, exc.rule)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        if problem == LIBYAML_TOO_DEEP:  # its scanner reads a flow nest ahead of our composer
            return SpecIssue(Location(file, line, col), "-", f"nested deeper than "
                             f"{limits.max_depth} levels", LIMIT_DEPTH)
        return SpecIssue(Location(file, line, col), "-", str(problem), R_SYNTAX)
    if isinstance(exc, yaml.reader.ReaderError):  # e.g. a control character: not "marked"
        index = exc.position
        if getattr(loader, "reader_counts_bytes", False):
            index = len(text.encode("utf-8", "surrogatepass")[:index].decode("utf-8", "ignore"))
        line, col = _position(text, index)
        return SpecIssue(Location(file, line, col), "-",
                         f"unacceptable character #x{exc.character:04x}: {exc.reason}", R_SYNTAX)
    if isinstance(exc, UnicodeEncodeError):  # a lone surrogate (never from a file: decode_spec)
        line, col = _position(text, exc.start)
        return SpecIssue(Location(file, line, col), "-", f"not valid Unicode: {exc.reason} "
                         f"(U+{ord(text[exc.start]):04X})", R_SYNTAX)
    return SpecIssue(Location(file, 1, 1), "-", str(exc).splitlines()[0], R_SYNTAX)


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of a character index (the reader's errors know only that)."""
    index = max(0, min(index, len(text)))
    return text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1


def load_paths(paths: list[Path], relative_to: Path | None = None,
               limits: LoaderLimits = DEFAULT_LIMITS) -> list[Document]:
    """Load every document of every spec file under ``paths``; all errors at once.

    ``relative_to`` names files relative to a root in messages (a Git checkout's files are
    reported as the repository path a person edits, not our snapshot folder).
    """
    docs: list[Document] = []
    files, issues = _collect(paths)  # what cannot be listed is reported with what cannot be read
    for path in files:
        shown = str(path.relative_to(relative_to)) if relative_to is not None else str(path)
        try:
            text = decode_spec(read_spec_bytes(path, limits, shown), shown)
            docs.extend(load_text(text, shown, limits))
        except SpecError as exc:
            issues.extend(exc.issues)
    if issues:
        raise SpecError(issues)
    return docs


class _Builder:
    """Plain data from a node tree (``loader``: a _Limits loader), with a budget: an alias is
    the same node reached again, so the tree can expand to far more values than the text holds
    (and, with an anchor inside itself, forever); the budget and the depth check stop both."""

    def __init__(self, loader: Any, doc: Document, limits: LoaderLimits,
                 composed: bool = True) -> None:
        self.loader, self.doc, self.limits = loader, doc, limits
        # False: nothing counted the nodes as they were composed (libyaml composed a text
        # without aliases), so building counts them as the composer would: every key and
        # value of the file, and each one's depth, refused with the composer's own message.
        self.composed = composed

    def _composing(self, node: yaml.Node, depth: int) -> None:
        """The composer's limits, for a node at ``depth`` (the document's root is 1)."""
        self.loader.built += 1
        if self.loader.built > self.limits.max_nodes:
            raise _LimitExceeded(node.start_mark, f"more than {self.limits.max_nodes} values "
                                 "in one file", LIMIT_NODES)
        if depth > self.limits.max_depth:
            raise _LimitExceeded(node.start_mark, f"nested deeper than "
                                 f"{self.limits.max_depth} levels", LIMIT_DEPTH)

    def build(self, node: yaml.Node, path: PathKey) -> Any:
        if not self.composed:
            self._composing(node, len(path) + 1)
            return self._build(node, path)
        self.loader.built += 1
        if self.loader.built > self.limits.max_nodes:
            raise _LimitExceeded(node.start_mark, f"expands to more than "
                                 f"{self.limits.max_nodes} values (aliases count each time "
                                 "they are used)", LIMIT_NODES)
        if len(path) > self.limits.max_depth:
            raise _LimitExceeded(node.start_mark, f"nested deeper than {self.limits.max_depth} "
                                 "levels (through aliases)", LIMIT_DEPTH)
        return self._build(node, path)

    def _build(self, node: yaml.Node, path: PathKey) -> Any:
        doc = self.doc
        doc.marks[path] = _mark(node)
        if isinstance(node, yaml.CollectionNode) and node.tag not in PLAIN_TAGS:
            # We build collections ourselves, so PyYAML never judges their tags: refuse what
            # it would refuse on a scalar rather than silently drop the tag.
            raise SpecError([SpecIssue(_loc(doc, node), _dotted(path),
                                       f"YAML tag {node.tag!r} is not allowed", R_SYNTAX)])
        if isinstance(node, yaml.MappingNode):
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if not self.composed:
                    self._composing(key_node, len(path) + 2)
                key = self._scalar(key_node, path)
                if not isinstance(key, str | int | float | bool):
                    raise SpecError([SpecIssue(_loc(doc, key_node), _dotted(path),
                                               "mapping keys must be scalars", R_SYNTAX)])
                if key in result:
                    raise SpecError([SpecIssue(_loc(doc, key_node), _dotted((*path, str(key))),
                                               "duplicate key", "yaml-duplicate-key")])
                result[key] = self.build(value_node, (*path, str(key)))
                # A field's errors point at its key, where the person wrote the field's name.
                doc.marks[(*path, str(key))] = _mark(key_node)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: PathKey) -> Any:
        """A scalar's value; one PyYAML cannot build (a 5,000-digit integer, a 31st of
        February) is refused where it stands rather than escaping as a traceback."""
        if node.tag == STR_TAG and isinstance(node, yaml.ScalarNode):
            return node.value  # most scalars: what the constructor would return, sooner
        try:
            value = self.loader.construct_object(node)
        except Exception as exc:  # PyYAML's constructors fail in many ways on bad tagged values
            raise SpecError([SpecIssue(_loc(self.doc, node), _dotted(path),
                                       f"cannot read this value: {exc}", R_SYNTAX)]) from None
        odd = _odd_number(node)
        if odd is not None:
            raise SpecError([SpecIssue(_loc(self.doc, node), _dotted(path), odd,
                                       R_NUMBER_FORM)])
        return value


def _odd_number(node: yaml.Node) -> str | None:
    """Why a number is not written in plain decimal (None when it is): YAML 1.1 reads
    ``5:00:00`` as 18000 (base 60), ``017`` as 15 (octal), ``0x1F`` as 31 and ``1_000`` as 1000,
    so a port or GPU index would silently become another."""
    if not isinstance(node, yaml.ScalarNode) or node.tag not in (INT_TAG, FLOAT_TAG):
        return None
    text = str(node.value)
    if node.tag == INT_TAG and not PLAIN_INT.fullmatch(text):
        return (f"{text[:40]!r} is not a plain decimal integer (YAML 1.1 reads it in another "
                "base or form); write the number in decimal, or quote it if a string is meant")
    if node.tag == FLOAT_TAG and (":" in text or "_" in text):
        return (f"{text[:40]!r} is not a plain decimal number (YAML 1.1 reads it in base 60 "
                "or with separators); write it in decimal, or quote it if a string is meant")
    return None


def _mark(node: yaml.Node) -> tuple[int, int]:
    """A node's 1-based line and column."""
    return node.start_mark.line + 1, node.start_mark.column + 1


def _loc(doc: Document, node: yaml.Node) -> Location:
    return Location(doc.file, *_mark(node))


def _dotted(path: PathKey) -> str:
    return ".".join(str(p) for p in path) or "-"
