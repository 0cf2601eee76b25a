"""Strict request-body checks shared by the endpoint groups.

Why strict: the real service validates bodies with pydantic models that forbid unknown keys and
answer 422; a client that sends a misspelt field must fail here exactly as it would there.
Each check raises :class:`Invalid` with a message naming the field; handlers turn it into
``422 {"code": "ValidationError", "message": ...}``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping

from emulators.rtvi.routing import Request, Response

VALIDATION_CODE = "ValidationError"


class Invalid(ValueError):
    """The body breaks the schema; the message names the field."""


def invalid_response(exc: Invalid) -> Response:
    return Response.error(422, VALIDATION_CODE, str(exc))


def body_json(request: Request) -> object:
    """The parsed JSON body; an empty or malformed one is Invalid (422, as FastAPI answers)."""
    if not request.body.strip():
        raise Invalid("body: field required")
    try:
        return request.json()
    except (ValueError, UnicodeDecodeError):
        raise Invalid("body: not valid JSON") from None


def json_object(request: Request) -> dict[str, object]:
    body = body_json(request)
    if not isinstance(body, dict):
        raise Invalid("body: expected a JSON object")
    return body


def only_keys(body: Mapping[str, object], allowed: Iterable[str], where: str = "body") -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise Invalid(f"{where}: extra fields not permitted: {', '.join(unknown)}")


def require(body: Mapping[str, object], key: str, where: str = "body") -> object:
    if key not in body:
        raise Invalid(f"{where}.{key}: field required")
    return body[key]


def string(value: object, name: str, max_len: int | None = None) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{name}: expected a string")
    if max_len is not None and len(value) > max_len:
        raise Invalid(f"{name}: at most {max_len} characters")
    return value


def boolean(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"{name}: expected a boolean")
    return value


def number(value: object, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise Invalid(f"{name}: expected a number")
    if not low <= value <= high:
        raise Invalid(f"{name}: must be in {low:g}..{high:g}")
    return float(value)


def integer(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{name}: expected an integer")
    if not low <= value <= high:
        raise Invalid(f"{name}: must be in {low}..{high}")
    return value


def uuid_text(value: object, name: str) -> str:
    """A UUID in canonical lower-case form."""
    text = string(value, name)
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise Invalid(f"{name}: not a valid UUID") from None


def dumps(payload: object) -> str:
    return json.dumps(payload, separators=(",", ":"))
