"""Validate HTTP exchanges against the published RTVI OpenAPI (``rtvi-openapi.json``).

Why a validator of our own around ``jsonschema``: a contract test must judge what went over the
wire -- request body, status, response body, each SSE event -- by the spec alone, so that the
emulator and the product's client cannot share a misreading. OpenAPI 3.1 schemas are JSON Schema
2020-12; ``$ref``s resolve against the whole document (registered under ``SPEC_URI``); ``format``
is checked where ``jsonschema`` knows the format (``uuid``).

Reusable: ``validate_exchange(method, path, status, request_body, response_body, query=...,
events=...)`` raises :class:`ContractViolation` listing every problem; ``validate_recorded`` takes
one record of the emulator's ``RTVI_EMU_RECORD`` file (see ``emulators/rtvi/recorder.py``), so
the product's end-to-end runs can push every exchange they caused through the same checks.

What is checked, per exchange:
- the operation exists (method + path matched against the spec's templates);
- the status is documented for it (an undocumented status is a violation by itself);
- the response body matches the schema of that status (JSON bodies; a documented response
  without content, or ``schema: {}``, accepts anything);
- SSE events: each JSON event matches the 200 schema; ``[DONE]`` may only come last. One
  allowance the spec's schema does not state (contracts/rtvi-api.md does: "SSE events may be
  flat chunks or wrapped"): a ``generate_captions`` 200 -- each event, and the non-streaming
  body, which the emulator's ``caption_shape`` knob shapes alike -- may instead be one flat
  chunk matching the response's item schema ``VlmCaptionResponse``;
- the request: path and query parameters and the body against ``requestBody``. A 2xx, 400 or 409
  answer requires a conforming request (a non-conforming one must be refused with 422); a 422
  requires a non-conforming one (else the server refused a valid request). 401, 429 and 5xx make
  no claim about the request (authentication and load come before validation).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs on this machine's index
import referencing
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).with_name("rtvi-openapi.json")
SPEC_URI = "urn:rtvi-openapi"
JSON = "application/json"
DONE = "[DONE]"
CONFORMING_STATUSES = frozenset({400, 409})
NO_CLAIM_STATUSES = frozenset({401, 429})
FLAT_CAPTION_ITEM = "#/components/schemas/VlmCaptionResponse"
CAPTIONS_PATH = "/v1/generate_captions"
_BOOLEAN_TEXT = {"true": True, "1": True, "yes": True, "on": True,
                 "false": False, "0": False, "no": False, "off": False}


class ContractViolation(AssertionError):
    """One exchange breaks the spec; the message lists every problem found."""


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    spec: Mapping[str, Any]
    params: Mapping[str, str]  # path parameters taken from the concrete path


@functools.cache
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SPEC_PATH.read_text())
    return loaded


@functools.cache
def _registry() -> referencing.Registry[Any]:
    resource = referencing.Resource.from_contents(spec(), default_specification=DRAFT202012)
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(SPEC_URI, resource)
    return registry


def _validator(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        _absolute(schema),
        registry=_registry(),
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )


def _absolute(schema: Any) -> Any:
    """``#/...`` references rewritten against ``SPEC_URI`` (path-level schemas are inline)."""
    if isinstance(schema, dict):
        return {
            key: f"{SPEC_URI}{value}" if key == "$ref" and value.startswith("#")
            else _absolute(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_absolute(item) for item in schema]
    return schema


def schema_errors(instance: object, schema: Mapping[str, Any]) -> list[str]:
    """Every way ``instance`` breaks ``schema`` (empty when it conforms)."""
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in _validator(schema).iter_errors(instance)
    ]


def component(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


@functools.cache
def _templates() -> list[tuple[str, re.Pattern[str]]]:
    compiled = []
    for template in spec()["paths"]:
        pattern = re.sub(r"\\\{([^}]+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
        compiled.append((template, re.compile(pattern + r"\Z")))
    # Literal templates before parameterised ones (``/v1/files/x/content`` vs ``{file_id}``).
    return sorted(compiled, key=lambda item: item[0].count("{"))


def operation(method: str, path: str) -> Operation | None:
    for template, pattern in _templates():
        found = pattern.match(path)
        ops = spec()["paths"][template]
        if found is not None and method.lower() in ops:
            return Operation(method.upper(), template, ops[method.lower()], found.groupdict())
    return None


def operations() -> list[tuple[str, str]]:
    """Every (METHOD, template) of the spec."""
    return [(m.upper(), t) for t, ops in spec()["paths"].items() for m in ops]


def _param_value(raw: str, schema: Mapping[str, Any]) -> object:
    kinds = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
    if "boolean" in kinds:
        return _BOOLEAN_TEXT.get(raw.lower(), raw)
    if "integer" in kinds:
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def _request_problems(
    op: Operation, query: Mapping[str, list[str]], request_body: object
) -> list[str]:
    problems: list[str] = []
    for param in op.spec.get("parameters", []):
        name, where, schema = param["name"], param["in"], param.get("schema", {})
        if where == "path":
            values = [op.params[name]] if name in op.params else []
        elif where == "query":
            values = list(query.get(name, []))[-1:]
        else:
            continue
        if not values:
            if param.get("required"):
                problems.append(f"{where} parameter {name}: missing")
            continue
        for error in schema_errors(_param_value(values[0], schema), schema):
            problems.append(f"{where} parameter {name}: {error}")
    body = op.spec.get("requestBody")
    if body is not None:
        if request_body is None:
            if body.get("required"):
                problems.append("request body: missing")
        else:
            content = body.get("content", {})
            media: dict[str, Any] = content.get(JSON) or next(iter(content.values()), {})
            problems += [f"request body: {e}" for e in schema_errors(request_body,
                                                                     media.get("schema", {}))]
    return problems


def _response_schema(op: Operation, status: int) -> tuple[Mapping[str, Any] | None, str | None]:
    """(schema or None for "anything", problem)."""
    responses = op.spec.get("responses", {})
    documented = responses.get(str(status)) or responses.get("default")
    if documented is None:
        return None, (f"status {status} is not documented for {op.method} {op.template} "
                      f"(documented: {', '.join(sorted(responses))})")
    content = documented.get("content") or {}
    media = content.get(JSON)
    if media is None:
        return None, None
    return media.get("schema") or None, None


def _event_problems(
    op: Operation, events: list[object], schema: Mapping[str, Any] | None
) -> list[str]:
    problems: list[str] = []
    for index, event in enumerate(events):
        if event == DONE:
            if index != len(events) - 1:
                problems.append(f"event {index}: [DONE] before the last event")
            continue
        if not isinstance(event, dict):
            problems.append(f"event {index}: not a JSON object ({str(event)[:80]!r})")
            continue
        if schema is None:
            continue
        problems += [f"event {index}: {e}" for e in _caption_errors(op, event, schema)]
    return problems


def _caption_errors(op: Operation, instance: object, schema: Mapping[str, Any]) -> list[str]:
    """Schema errors of a success body or event; a ``generate_captions`` one may instead be one
    flat chunk (``VlmCaptionResponse``: the shape servers stream, see the module docstring)."""
    errors = schema_errors(instance, schema)
    if errors and op.template == CAPTIONS_PATH:
        flat = schema_errors(instance, {"$ref": FLAT_CAPTION_ITEM})
        errors = [] if not flat else [*errors, *[f"(as a flat chunk) {e}" for e in flat]]
    return errors


def exchange_problems(
    method: str,
    path: str,
    status: int,
    request_body: object = None,
    response_body: object = None,
    *,
    query: Mapping[str, list[str]] | None = None,
    events: list[object] | None = None,
) -> list[str]:
    """Every way one exchange breaks the spec (empty when it conforms)."""
    op = operation(method, path)
    if op is None:
        return [f"{method} {path}: no such operation in the spec"]
    problems: list[str] = []
    schema, undocumented = _response_schema(op, status)
    if undocumented is not None:
        problems.append(undocumented)
    elif events is not None:
        problems += _event_problems(op, events, schema)
    elif schema is not None:
        errors = (_caption_errors(op, response_body, schema) if 200 <= status < 300
                  else schema_errors(response_body, schema))
        problems += [f"response: {e}" for e in errors]
    request = _request_problems(op, query or {}, request_body)
    if status == 422 and not request:
        problems.append("422 for a request that conforms to the spec")
    elif (200 <= status < 300 or status in CONFORMING_STATUSES) and request:
        problems += [f"answered {status} to a non-conforming request: {p}" for p in request]
    return problems


def validate_exchange(
    method: str,
    path: str,
    status: int,
    request_body: object = None,
    response_body: object = None,
    *,
    query: Mapping[str, list[str]] | None = None,
    events: list[object] | None = None,
) -> None:
    """Raise :class:`ContractViolation` unless the exchange conforms to the spec."""
    problems = exchange_problems(
        method, path, status, request_body, response_body, query=query, events=events
    )
    if problems:
        raise ContractViolation(f"{method} {path} -> {status}:\n  " + "\n  ".join(problems))


def validate_recorded(exchange: Mapping[str, Any]) -> None:
    """One record of the emulator's exchange log (``RTVI_EMU_RECORD``)."""
    validate_exchange(
        exchange["method"],
        exchange["path"],
        int(exchange["status"]),
        exchange.get("request_body"),
        exchange.get("response_body"),
        query=exchange.get("query") or {},
        events=exchange.get("events"),
    )


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def violations(exchanges: Iterable[Mapping[str, Any]]) -> list[str]:
    """The message of every exchange that breaks the spec."""
    found = []
    for exchange in exchanges:
        try:
            validate_recorded(exchange)
        except ContractViolation as exc:
            found.append(str(exc))
    return found
