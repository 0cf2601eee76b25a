"""Turn spec files into validated resources, or refuse them all with located messages.

The output, ``SpecSet``, is what every command works from. Any error anywhere refuses the whole
set: a half-valid spec set is never partly applied.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from specs.crossref import Resource, check_set
from specs.errors import Location, SpecError, SpecIssue
from specs.kinds import SPEC_KINDS
from specs.loader import DEFAULT_LIMITS, Document, LoaderLimits, PathKey, load_paths, load_text
from specs.models import API_VERSION, TAG_ERROR, TAG_MARK, Deployment, Host, SpecResource, StreamSet
from specs.rules import Finding
from specs.trust import TrustPolicy
from specs.values import value_findings

R_SCHEMA = "schema"
PYDANTIC_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


@dataclass
class SpecSet:
    """Validated resources with the document each came from (for locating later findings)."""

    resources: list[Resource] = field(default_factory=list)
    documents: dict[tuple[str, str], Document] = field(default_factory=dict)
    warnings: list[SpecIssue] = field(default_factory=list)
    # A resource another one made (``SpecKind.derives``): the field of that one's document
    # it comes from, where what is wrong with it is said.
    derived: dict[tuple[str, str], PathKey] = field(default_factory=dict)

    @property
    def hosts(self) -> list[Host]:
        return [r for r in self.resources if isinstance(r, Host)]

    @property
    def deployments(self) -> list[Deployment]:
        return [r for r in self.resources if isinstance(r, Deployment)]

    @property
    def streamsets(self) -> list[StreamSet]:
        return [r for r in self.resources if isinstance(r, StreamSet)]

    def get(self, kind: str, name: str) -> Resource | None:
        """The resource ``kind``/``name`` (the engine asks once per pass: a lookup, not a scan
        of a set that may hold thousands)."""
        return self._by_key.get((kind, name))

    @cached_property
    def _by_key(self) -> dict[tuple[str, str], Resource]:
        return {(r.kind, r.metadata.name): r for r in self.resources}

    def deployment(self, name: str) -> Deployment | None:
        return next((d for d in self.deployments if d.metadata.name == name), None)

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.metadata.name == name)

    def issue(self, resource: Resource, finding: Finding) -> SpecIssue:
        """Locate a finding about ``resource`` in its file."""
        key = (resource.kind, resource.metadata.name)
        doc = self.documents[key]
        origin = self.derived.get(key)
        return _issue(doc, finding if origin is None else _derived(resource, origin, finding))

    def source_file(self, resource: Resource) -> str:
        return self.documents[(resource.kind, resource.metadata.name)].file


def load_spec_set(paths: list[Path], relative_to: Path | None = None,
                  limits: LoaderLimits = DEFAULT_LIMITS,
                  trust: TrustPolicy | None = None) -> SpecSet:
    """Load and validate every spec under ``paths``; raise SpecError listing all errors."""
    return build_spec_set(load_paths(paths, relative_to, limits), trust=trust)


def parse_text(text: str, file: str = "<string>") -> SpecSet:
    """Validate specs given as text (tests, stdin)."""
    return build_spec_set(load_text(text, file))


def build_spec_set(docs: list[Document], *, cross: bool = True,
                   trust: TrustPolicy | None = None) -> SpecSet:
    """Validate ``docs`` into a spec set. ``cross=False`` leaves out the rules across resources
    (names, references, GPU and port claims): only ``bench/validate.py`` asks, to measure them.
    ``trust``: what the specs may read and run (the CLI and the daemon always pass the
    operator's policy; None judges nothing, for callers that read and run nothing)."""
    result = SpecSet()
    issues: list[SpecIssue] = []
    for doc in docs:
        resource = _parse(doc, issues)
        if resource is None:
            continue
        result.resources.append(resource)
        result.documents.setdefault((resource.kind, resource.metadata.name), doc)
        unsafe = [_issue(doc, Finding(path, message, rule))
                  for path, message, rule in value_findings(cast(BaseModel, resource),
                                                            screen=not doc.aliased)]
        issues.extend(unsafe)
        declared = SPEC_KINDS[resource.kind]
        rules = declared.rules
        found = [] if unsafe or rules is None else rules(resource)
        issues.extend(_issue(doc, f) for f in found)  # the rules quote values: only safe ones
        if trust is not None and not unsafe:
            issues.extend(_issue(doc, Finding(path, message, rule)) for path, message, rule
                          in trust.findings(cast(BaseModel, resource)))
        if declared.derives is not None and not unsafe and not found:
            issues.extend(_add_derived(result, declared.derives(resource, spec_hash(resource)),
                                       doc, declared.derived_from))
    if cross and not [i for i in issues if i.severity == "error"]:
        issues.extend(result.issue(res, f) for res, f in check_set(result.resources))
    issues.sort(key=lambda i: (i.location.file, i.location.line, i.location.col))
    result.warnings = capped([i for i in issues if i.severity == "warning"])
    errors = [i for i in issues if i.severity == "error"]
    if errors:  # capped apart from the warnings: a page of warnings never hides an error
        raise SpecError(capped(errors))
    return result


def _add_derived(result: SpecSet, made: list[Resource], doc: Document, origin: PathKey
                 ) -> list[SpecIssue]:
    """Add what a resource made to the set, judged by its kind's rules like a written one."""
    issues = []
    for extra in made:
        key = (extra.kind, extra.metadata.name)
        result.resources.append(extra)
        result.documents.setdefault(key, doc)
        result.derived.setdefault(key, origin)
        rules = SPEC_KINDS[extra.kind].rules
        issues += [result.issue(extra, f) for f in (rules(extra) if rules is not None else [])]
    return issues


def _derived(resource: Resource, origin: PathKey, finding: Finding) -> Finding:
    """A finding about a made resource, said at the field that made it."""
    where = ".".join(str(p) for p in finding.path[1:]) if finding.path[:1] == ("spec",) else ""
    return Finding(origin, f"the {resource.kind} it makes ({resource.kind}/"
                   f"{resource.metadata.name}) breaks a rule" + (f" at {where}" if where else "")
                   + f": {finding.message}", finding.rule, finding.severity)


MAX_ISSUES_PER_FILE = 20
MAX_ISSUES = 200
MAX_MORE_LINES = 20  # files named with how many of their issues are not shown
R_MORE = "max-issues"


def capped(issues: list[SpecIssue]) -> list[SpecIssue]:
    """At most ``MAX_ISSUES_PER_FILE`` issues of each file and ``MAX_ISSUES`` in all (sorted
    by place), then one line per file saying how many more there are: one value aliased a
    thousand times, or a thousand files, must not print a thousand refusals."""
    shown: list[SpecIssue] = []
    hidden: dict[str, list[SpecIssue]] = {}
    per_file: dict[str, int] = {}
    for issue in issues:
        file = issue.location.file
        if per_file.get(file, 0) < MAX_ISSUES_PER_FILE and len(shown) < MAX_ISSUES:
            shown.append(issue)
            per_file[file] = per_file.get(file, 0) + 1
        else:
            hidden.setdefault(file, []).append(issue)
    files = list(hidden.items())
    for file, rest in files[:MAX_MORE_LINES]:
        shown.append(SpecIssue(Location(file, 0, 0), "-", f"{len(rest)} more issue(s) in this "
                               "file not shown; fix the ones above first", R_MORE,
                               rest[0].severity))
    if len(files) > MAX_MORE_LINES:  # a thousand failing files: one line for all the rest
        rest = [issue for _, more in files[MAX_MORE_LINES:] for issue in more]
        shown.append(SpecIssue(Location(files[MAX_MORE_LINES][0], 0, 0), "-",
                               f"and {len(rest)} more issue(s) in {len(files) - MAX_MORE_LINES}"
                               " more file(s) not shown", R_MORE, rest[0].severity))
    return shown


def _parse(doc: Document, issues: list[SpecIssue]) -> Resource | None:
    data = doc.data
    if not isinstance(data, dict):
        issues.append(_issue(doc, Finding((), "a spec document must be a mapping with apiVersion, "
                                          "kind, metadata and spec", R_SCHEMA)))
        return None
    if data.get("apiVersion") != API_VERSION:
        issues.append(_issue(doc, Finding(("apiVersion",), f"must be {API_VERSION!r}, got "
                                          f"{data.get('apiVersion')!r}", R_SCHEMA)))
        return None
    kind = SPEC_KINDS.get(str(data.get("kind")))
    if kind is None:
        issues.append(_issue(doc, Finding(("kind",), f"unknown kind {data.get('kind')!r}; known: "
                                          f"{', '.join(SPEC_KINDS)}", R_SCHEMA)))
        return None
    model = kind.model
    try:
        # A registered kind's model has the shape of a Resource (apiVersion, kind, metadata,
        # spec); the union names only the built-ins.
        return cast(Resource, model.model_validate(data))
    except ValidationError as exc:
        for err in exc.errors():
            loc, message = err["loc"], PYDANTIC_MESSAGES.get(err["type"], err["msg"])
            if err["type"] == TAG_ERROR:  # a union chosen by ``type``: the field is at fault
                loc = (*loc, "type")
                chosen = _at(data, loc[:-1])
                if not isinstance(chosen, dict):
                    message = f"must be a mapping whose type {message}"
                elif "type" not in chosen:
                    message = f"required field is missing: it {message}"
            path = _data_path(data, loc)
            issues.append(_issue(doc, Finding(path, message, R_SCHEMA)))
        return None


def _data_path(data: Any, loc: tuple[int | str, ...]) -> PathKey:
    """Pydantic locations include union-member names (``gpus.0.int``) and the member a
    ``type`` chose (``spec.type=canary.canary.streams``); keep the real path."""
    path: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and str(part) in node:
            node = node[str(part)]
            path.append(str(part))
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            path.append(part)
        elif isinstance(part, str) and part.startswith(TAG_MARK):
            continue  # the member a ``type`` chose: not a field
        elif isinstance(node, dict) and not path[len(path):]:
            path.append(str(part))  # a missing or unknown field: name it, point at its parent
            break
        else:
            break
    return tuple(path)


def _at(data: Any, loc: tuple[int | str, ...]) -> Any:
    """What ``data`` holds at ``loc`` (None where it holds nothing)."""
    for part in loc:
        data = data.get(str(part)) if isinstance(data, dict) else None
    return data


def _issue(doc: Document, finding: Finding) -> SpecIssue:
    field_name = ".".join(str(p) for p in finding.path) or "-"
    return SpecIssue(doc.locate(finding.path), field_name, finding.message, finding.rule,
                     finding.severity)


def spec_hash(resource: SpecResource) -> str:
    """Content hash of what a resource asks for (kind, name, spec); labels don't count.

    Defaults are left out, so a release that adds an optional field (at its default) does not
    change every existing resource's hash and recreate what is running; so is what its kind
    says its hash leaves out (``SpecKind.hash_excludes``: a Deployment's readiness budget)."""
    declared = SPEC_KINDS.get(resource.kind)
    exclude = set(declared.hash_excludes) if declared is not None else set()
    body = {"kind": resource.kind, "name": resource.metadata.name,
            "spec": resource.spec.model_dump(mode="json", exclude_defaults=True,
                                             exclude=exclude)}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return digest


def json_schema() -> dict[str, Any]:
    """One JSON Schema covering every kind, for editors (yaml-language-server)."""
    defs: dict[str, Any] = {}
    refs = []
    for kind, declared in SPEC_KINDS.items():
        schema = declared.model.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        defs[kind] = schema
        refs.append({"$ref": f"#/$defs/{kind}"})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "rtvi-reconciler spec (rtvi.reconciler/v1)", "oneOf": refs, "$defs": defs}
