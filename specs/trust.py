"""The trust boundary: what a spec may make the reconciler read and run, set by the operator.

In GitOps a spec is written by whoever can push to the watched repository, and some fields
name files on the reconciler's own machine (a secret's ``fromFile``, a media file, the VSS
harness checkout) or a command it runs (a benchmark's ``harness.argv``). Without a boundary a
pushed spec reads ``/etc/shadow`` into a container's environment or runs ``sh -c``. So the
operator, never the spec, says which folders each kind of file may come from and which
commands may be run (``TrustPolicy``: the CLI's ``--trust FILE``, ``--allow-read``,
``--allow-run``, or a local file); a spec that reaches outside is refused at
``validate``/``plan`` naming the field, the path and the rule, before anything is read or run.

The default allows nothing: right for a daemon watching a remote repository, and the
quickstart reads no file and runs no command. Which fields read or run is declared on the
models (``reads(category)``, ``runs()``), so a field added later is judged without anyone
remembering to.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

CATEGORIES = ("secrets", "media", "harness", "mounts", "ssh", "evidence", "images")
"""What a spec may read (or write): secret files, media (sources, canary and port media,
smoke clips), the VSS harness checkout and its config, the Host folders it bind-mounts into
its service (a mount of ``/etc`` would hand the machine's files to a container a push
controls), the SSH key and known_hosts files a Host logs in with, and the folder an
Experiment writes its evidence under (``evidenceRoot``; unset: under the state directory), and
the ``docker save`` archives a Host's images may be loaded from (``images.archives``)."""
READS = "x-reads"
RUNS = "x-runs"
R_TRUST = "trust boundary: the operator's folders and commands"
PathKey = tuple[str | int, ...]


RELATIVE_TO = "x-relative-to"
REGISTRY_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?")


def reads(category: str, relative_to: str | None = None, **kwargs: Any) -> Any:
    """A pydantic ``Field`` (same arguments) whose path the reconciler reads, in ``category``;
    a relative value is joined to the sibling field ``relative_to`` (a harness config to its
    checkout), and judged there like an absolute one."""
    extra: dict[str, Any] = {READS: category}
    if relative_to is not None:
        extra[RELATIVE_TO] = relative_to
    return Field(json_schema_extra=extra, **kwargs)


def runs(**kwargs: Any) -> Any:
    """A pydantic ``Field`` for an argv whose first word the reconciler runs."""
    return Field(json_schema_extra={RUNS: True}, **kwargs)


class TrustError(Exception):
    """The operator's trust settings cannot be used (named file, entry and why)."""


@dataclass(frozen=True)
class TrustPolicy:
    """Folders per category a spec may read from, and commands it may run (argv[0] exactly).
    ``origin`` says where it came from, for messages."""

    folders: dict[str, tuple[str, ...]] = field(default_factory=dict)
    commands: tuple[str, ...] = ()
    origin: str = "the default, which allows nothing"
    named: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The folders as the operator wrote them (normalised, links not followed): a machine
    where a folder's link leads elsewhere, or is missing (a job's runner, which has only
    what it binds), still holds a path under the name the operator gave."""
    registries: tuple[str, ...] = ()
    """Registries a Host's engine may pull from for a spec (``host`` allows every port of
    it, ``host:port`` that port): a pulled image is code the spec chose, run on the Host."""

    def pulls_from(self, registry: str) -> bool:
        """Whether an image may be pulled from ``registry`` (``host[:port]``)."""
        host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
        return registry in self.registries or host in self.registries

    def refused_pull(self, registry: str) -> str | None:
        """Why a pull from ``registry`` is refused (None: it is allowed)."""
        if self.pulls_from(registry):
            return None
        allowed = ", ".join(self.registries) or "none"
        return (f"registry {registry} is not one images may be pulled from ({allowed}; set by "
                f"{self.origin}): add it with --allow-pull {registry} or in the trust file's "
                f"[pull] registries")

    def with_pulls(self, registries: tuple[str, ...]) -> TrustPolicy:
        """This policy plus registries given as options."""
        if not registries:
            return self
        origin = self.origin if self.folders or self.commands or self.registries else ""
        return replace(self, registries=(*self.registries, *registries),
                       origin=f"{origin + ' and ' if origin else ''}--allow-pull")

    def with_cli(self, allow_read: tuple[str, ...], allow_run: tuple[str, ...]) -> TrustPolicy:
        """This policy plus ``CATEGORY=DIR`` folders and commands given as options."""
        folders = {k: list(v) for k, v in (self.named or self.folders).items()}
        for item in allow_read:
            category, sep, folder = item.partition("=")
            if not sep:
                raise TrustError(f"--allow-read {item!r}: expected CATEGORY=DIR "
                                 f"(categories: {', '.join(CATEGORIES)})")
            folders.setdefault(category, []).append(folder)
        if not allow_read and not allow_run:
            return self
        origin = self.origin if self.folders or self.commands else ""
        return replace(policy({k: tuple(v) for k, v in folders.items()},
                              (*self.commands, *allow_run),
                              f"{origin + ' and ' if origin else ''}--allow-read/--allow-run"),
                       registries=self.registries)

    def allowed(self, category: str, path: str) -> bool:
        """Whether ``path`` (absolute) lies in one of ``category``'s folders, symlinks
        resolved on both sides (a link inside a folder that points out of it is outside)."""
        if not self.folders.get(category):
            return False  # nothing allowed: no need to resolve the path (the default)
        return self.holds(category, os.path.realpath(path))

    def harness_reads(self, path: str) -> bool:
        """Whether a file the harness reads (an argument, a scenario's video) may be read:
        it lies in the harness or the media folders."""
        return self.allowed("harness", path) or self.allowed("media", path)

    def holds(self, category: str, real: str) -> bool:
        """Whether the resolved path ``real`` lies in one of ``category``'s folders."""
        roots = (*self.folders.get(category, ()), *self.named.get(category, ()))
        return any(inside(real, root) for root in roots)

    def findings(self, resource: BaseModel) -> Iterator[tuple[PathKey, str, str]]:
        """(path, message, rule) for every read or run of ``resource`` outside the policy."""
        for pattern, mark in mark_paths(type(resource)):
            for where, value in _follow(resource, pattern, ()):
                if mark == RUNS:
                    yield from self._run(where, value, _sibling(resource, where, "workdir"))
                    continue
                value = absolute(resource, where, value)
                if value is not None and not self.allowed(mark, value):
                    roots = ", ".join(self.folders.get(mark, ())) or "none"
                    real = os.path.realpath(value)
                    leads = f" (it leads to {real!r})" if real != value else ""
                    yield where, (f"{value!r}{leads} is outside the folders {mark} may be "
                                  f"read from ({roots}; set by {self.origin}): add one with "
                                  f"--allow-read {mark}=DIR or in the trust file"), R_TRUST

    def _run(self, where: PathKey, argv: Any, workdir: str | None = None
             ) -> Iterator[tuple[PathKey, str, str]]:
        """An argv runs when it starts with one allowed command, word for word: ``python3``
        lets any Python program run (``python3 -c ...`` too), ``python3
        perf/benchmark/rtvi_perf_benchmark.py`` only the harness."""
        if not isinstance(argv, list) or not argv:
            return
        matched = [words for words in map(shlex.split, self.commands)
                   if argv[:len(words)] == words]
        if matched:
            yield from self._arguments(where, argv, max(map(len, matched)), workdir)
            return
        allowed = ", ".join(repr(c) for c in self.commands) or "none"
        yield (*where, 0), (f"{shlex.join(argv)[:200]!r} does not start with a command this "
                            f"reconciler may run ({allowed}; set by {self.origin}): add it "
                            "with --allow-run or in the trust file"), R_TRUST


    def _arguments(self, where: PathKey, argv: list[Any], allowed: int,
                   workdir: str | None = None) -> Iterator[tuple[PathKey, str, str]]:
        """The spec's own arguments after the allowed command: a path among them (``/x``,
        ``--opt=/x``, or one that climbs out of ``workdir`` with ``..``) is a file the command
        reads (a harness runs with its folder bound), so it must lie in the harness or media
        folders like any other path a spec names."""
        for index in range(allowed, len(argv)):
            item = argv[index]
            if not isinstance(item, str):
                continue
            item = item.split("=", 1)[1] if item.startswith("-") and "=" in item else item
            if not item.startswith("/"):
                if ".." not in item.split("/"):
                    continue  # a word, or a path inside the working directory
                item = posixpath.normpath(posixpath.join(workdir or "/", item))
            if self.harness_reads(item):
                continue
            real = os.path.realpath(item)
            leads = f" (it leads to {real!r})" if real != item else ""
            roots = ", ".join((*self.folders.get("harness", ()), *self.folders.get(
                "media", ()))) or "none"
            yield (*where, index), (f"argument {item!r}{leads} is outside the folders harness "
                                    f"and media may be read from ({roots}; set by "
                                    f"{self.origin})"), R_TRUST


NOTHING = TrustPolicy()
"""The default: a spec may read no file and run no command."""
_ENFORCED: list[TrustPolicy | None] = [None]


def inside(path: str, folder: str) -> bool:
    """Whether the normalised absolute ``path`` is ``folder`` or lies under it (``/jobs`` is
    not under ``/job``)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def enforce(chosen: TrustPolicy | None) -> None:
    """Make ``chosen`` the policy judged again where a file is used (``enforced``): a
    symlink planted in an allowed folder after validation must not be followed out of it.
    The CLI and the daemon set it when they read the operator's settings."""
    _ENFORCED[0] = chosen


def enforced() -> TrustPolicy | None:
    """The operator's policy in force in this process (None: a library caller set none)."""
    return _ENFORCED[0]


def policy(folders: dict[str, tuple[str, ...]], commands: tuple[str, ...],
           origin: str) -> TrustPolicy:
    """A policy whose folders are checked (known category, absolute) and resolved."""
    resolved: dict[str, tuple[str, ...]] = {}
    named: dict[str, tuple[str, ...]] = {}
    for category, roots in folders.items():
        if category not in CATEGORIES:
            raise TrustError(f"{origin}: unknown category {category!r} (known: "
                             f"{', '.join(CATEGORIES)})")
        for root in roots:
            if not isinstance(root, str) or not root.startswith("/"):
                raise TrustError(f"{origin}: {category} folder {root!r} must be an absolute "
                                 "path")
        named[category] = tuple(posixpath.normpath(r) for r in roots)
        resolved[category] = tuple(os.path.realpath(r) for r in named[category])
    for command in commands:
        try:
            words = shlex.split(command) if isinstance(command, str) else []
        except ValueError:
            words = []
        if not words:
            raise TrustError(f"{origin}: a command is a program and, optionally, its first "
                             f"arguments (shell words), got {command!r}")
    return TrustPolicy(resolved, tuple(commands), origin, named)


def load_policy(path: Path) -> TrustPolicy:
    """The policy in a TOML file::

        [read]
        secrets = ["/run/secrets"]
        media = ["/srv/media"]
        harness = ["/opt/vss"]
        mounts = ["/models"]
        ssh = ["/etc/rtvi/ssh"]
        evidence = ["/var/lib/rtvi/evidence"]
        [run]
        commands = ["python3"]
        [pull]
        registries = ["nvcr.io", "registry.example:5000"]
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrustError(f"trust file {path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TrustError(f"trust file {path}: not TOML: {exc}") from None
    unknown = set(data) - {"read", "run", "pull"}
    read, run, pull = data.get("read", {}), data.get("run", {}), data.get("pull", {})
    if unknown or not isinstance(read, dict) or not isinstance(run, dict) or (
            set(run) - {"commands"}) or not isinstance(pull, dict) or set(pull) - {"registries"}:
        raise TrustError(f"trust file {path}: expected only [read] ({', '.join(CATEGORIES)}: "
                         "lists of folders), [run] (commands: a list) and [pull] (registries: "
                         "a list)")
    registries = pull.get("registries", [])
    if not isinstance(registries, list) or not all(
            isinstance(r, str) and REGISTRY_RE.fullmatch(r) for r in registries):
        raise TrustError(f"trust file {path}: [pull] registries must be a list of registries "
                         "as image references name them (host or host:port, no scheme)")
    folders = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in read.items()}
    commands = run.get("commands", [])
    if not isinstance(commands, list):
        raise TrustError(f"trust file {path}: [run] commands must be a list")
    return replace(policy(folders, tuple(commands), f"trust file {path}"),
                   registries=tuple(registries))


def default_trust_file(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/rtvi-reconciler/trust.toml`` (``~/.config`` by default)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rtvi-reconciler" / "trust.toml"


@cache
def mark_paths(model: type[BaseModel]) -> tuple[tuple[tuple[str, ...], str], ...]:
    """Every field path of ``model`` that reads or runs (``[]``: each item of a list, ``{}``:
    each value of a map) with its mark (a category, or ``x-runs``), from the JSON Schema."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})
    found: list[tuple[tuple[str, ...], str]] = []

    def walk(node: dict[str, Any], path: tuple[str, ...], depth: int) -> None:
        if depth > 40:
            return
        mark = node.get(READS) or (RUNS if node.get(RUNS) else None)
        if mark is not None:
            found.append((path, str(mark)))
            return
        if "$ref" in node:
            walk(defs[node["$ref"].rsplit("/", 1)[-1]], path, depth + 1)
        for sub in node.get("anyOf", []) + node.get("oneOf", []):
            walk(sub, path, depth + 1)
        for name, sub in node.get("properties", {}).items():
            walk(sub, (*path, name), depth + 1)
        if isinstance(node.get("items"), dict):
            walk(node["items"], (*path, "[]"), depth + 1)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], (*path, "{}"), depth + 1)

    walk(schema, (), 0)
    return tuple(dict.fromkeys(found))


def read_paths(resource: BaseModel, categories: tuple[str, ...]) -> list[str]:
    """Every absolute path ``resource`` reads in ``categories`` (what a run executing as a job
    on its Host must find there: its media, its harness checkout)."""
    return [path for _, path in read_marks(resource, categories)]


def read_marks(resource: BaseModel, categories: tuple[str, ...]) -> list[tuple[str, str]]:
    """(category, path) for every absolute path ``resource`` reads in ``categories``: what a
    container that binds them asks the policy again where and when it is created."""
    return [(mark, path) for pattern, mark in mark_paths(type(resource)) if mark in categories
            for where, value in _follow(resource, pattern, ())
            if (path := absolute(resource, where, value)) is not None]


def _parent(resource: BaseModel, where: PathKey) -> Any:
    """The model (or list, or map) holding the field at ``where``."""
    parent: Any = resource
    for step in where[:-1]:
        parent = parent[step] if isinstance(step, int) or isinstance(parent, dict) else getattr(
            parent, str(step), None)
    return parent


def _sibling(resource: BaseModel, where: PathKey, name: str) -> str | None:
    """The string field ``name`` beside the field at ``where`` (an argv's workdir), if any."""
    parent = _parent(resource, where)
    value = getattr(parent, name, None) if isinstance(parent, BaseModel) else None
    return value if isinstance(value, str) else None


def absolute(resource: BaseModel, where: PathKey, value: Any) -> str | None:
    """The absolute path a read field's ``value`` names: itself, or (for a field marked
    ``relative_to``) joined to its sibling and normalised; None when it names no path here."""
    if not isinstance(value, str) or not value:
        return None
    if value.startswith("/"):
        return value
    parent = _parent(resource, where)
    info = type(parent).model_fields.get(str(where[-1])) if isinstance(parent, BaseModel) else None
    extra = info.json_schema_extra if info is not None else None
    base = getattr(parent, str(extra[RELATIVE_TO]), None) if isinstance(extra, dict) and (
        RELATIVE_TO in extra) else None
    if not isinstance(base, str) or not base.startswith("/"):
        return None
    return posixpath.normpath(posixpath.join(base, value))


def _follow(node: Any, pattern: tuple[str, ...], where: PathKey) -> Iterator[tuple[PathKey, Any]]:
    if not pattern:
        yield where, node
        return
    step, rest = pattern[0], pattern[1:]
    if step == "[]" and isinstance(node, list):
        for i, item in enumerate(node):
            yield from _follow(item, rest, (*where, i))
    elif step == "{}" and isinstance(node, dict):
        for key, item in node.items():
            yield from _follow(item, rest, (*where, key))
    elif isinstance(node, BaseModel) and step in type(node).model_fields:
        yield from _follow(getattr(node, step), rest, (*where, step))
