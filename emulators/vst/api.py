"""The HTTP API: VST's ``/vst/api/v1`` sensor endpoints and the emulator-only ``/emulator`` ones.

Why a table of regular expressions and plain functions: a dozen routes with one path parameter
do not need a framework, and keeping it independent of the RTVI emulator's router means neither
emulator's API shapes leak into the other.

Choices where the real VST is unknown (the contract in ``shared/contracts/vst-api.md`` is silent):
- Errors are ``{"error_code": str, "error_message": str}``. Request validation fails with 422
  and names the offending field; a body that is not a JSON object is 400.
- Bodies are sent with ``Content-Type: text/plain``, as VST's reference says its JSON is: a
  client must parse the body whatever the content type says.
- ``tags`` may be a string or a list of strings; it is echoed back unchanged.
- Adding a sensor with a name or URL that already exists creates another sensor; deduplication
  is the client's job (list first, trust only its own inventory).
- ``sensorUrl`` is returned with any password in its user info replaced by ``***``; the
  ``password`` field is never returned.
- ``state`` is ``online`` unless the sensor was dropped through the admin API (``offline``); the
  source itself is not probed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from emulators.vst.knobs import Knobs
from emulators.vst.sensors import (
    STATE_OFFLINE,
    STATE_ONLINE,
    InjectedFailure,
    Inventory,
    Sensor,
    UnknownSensor,
)
from emulators.vst.source import Source

API_PREFIX = "/vst/api/v1"
ADMIN_PREFIX = "/emulator"
ADD_REQUIRED = ("sensorUrl", "name")
ADD_OPTIONAL = ("username", "password", "location", "tags")
SOURCE_SCHEME = "rtsp://"
FAULT_OPS = ("add",)
MIN_FAULT_STATUS = 400
MAX_FAULT_STATUS = 599


@dataclass(frozen=True)
class Reply:
    """A status and a JSON-serialisable payload; the server writes it."""

    status: int
    payload: object


class Invalid(ValueError):
    """The request is well-formed JSON but breaks the contract (422, or ``status``)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Context:
    """What handlers work on: the inventory and the start-up knobs (for ``/emulator/state``)."""

    inventory: Inventory
    knobs: Knobs
    rtsp_port: int


Handler = Callable[[Context, Mapping[str, str], bytes], Reply]


def error(status: int, code: str, message: str) -> Reply:
    return Reply(status, {"error_code": code, "error_message": message})


# --- VST sensor API ---------------------------------------------------------------------------


def version(ctx: Context, _params: Mapping[str, str], _body: bytes) -> Reply:
    return Reply(200, {"type": "vst", "version": ctx.knobs.version, "emulated": True})


def add_sensor(ctx: Context, _params: Mapping[str, str], body: bytes) -> Reply:
    fields = _json_object(body)
    _check_add_fields(fields)
    source = Source(
        url=_text(fields, "sensorUrl"),
        username=_optional_text(fields, "username"),
        password=_optional_text(fields, "password"),
    )
    if not source.url.startswith(SOURCE_SCHEME):
        raise Invalid("field 'sensorUrl' must be an rtsp:// URL")
    tags = fields.get("tags")
    if tags is not None and not _is_tags(tags):
        raise Invalid("field 'tags' must be a string or a list of strings")
    try:
        sensor = ctx.inventory.add(
            _text(fields, "name"), source, _optional_text(fields, "location"), tags
        )
    except InjectedFailure as fault:
        return error(fault.status, "VMSInternalError", "sensor/add failed (injected fault)")
    return Reply(200, {"sensorId": sensor.sensor_id})


def list_sensors(ctx: Context, _params: Mapping[str, str], _body: bytes) -> Reply:
    return Reply(200, [_sensor_view(sensor) for sensor in ctx.inventory.sensors()])


def sensor_streams(ctx: Context, params: Mapping[str, str], _body: bytes) -> Reply:
    return Reply(200, ctx.inventory.streams(ctx.inventory.sensor(params["sensor_id"])))


def all_streams(ctx: Context, _params: Mapping[str, str], _body: bytes) -> Reply:
    inventory = ctx.inventory
    return Reply(200, {s.sensor_id: inventory.streams(s) for s in inventory.sensors()})


def delete_sensor(ctx: Context, params: Mapping[str, str], _body: bytes) -> Reply:
    ctx.inventory.delete(params["sensor_id"])
    return Reply(200, True)


# --- emulator-only admin API ------------------------------------------------------------------


def drop_sensor(ctx: Context, params: Mapping[str, str], _body: bytes) -> Reply:
    sensor = ctx.inventory.set_dropped(params["sensor_id"], True)
    return Reply(200, {"sensorId": sensor.sensor_id, "dropped": sensor.dropped})


def restore_sensor(ctx: Context, params: Mapping[str, str], _body: bytes) -> Reply:
    sensor = ctx.inventory.set_dropped(params["sensor_id"], False)
    return Reply(200, {"sensorId": sensor.sensor_id, "dropped": sensor.dropped})


def set_fault(ctx: Context, _params: Mapping[str, str], body: bytes) -> Reply:
    """``{"op": "add", "count": N, "status": 500}``: the next N ``sensor/add`` calls fail."""
    fields = _json_object(body)
    unknown = sorted(set(fields) - {"op", "count", "status"})
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}")
    if fields.get("op") not in FAULT_OPS:
        raise Invalid(f"field 'op' must be one of: {', '.join(FAULT_OPS)}")
    count, status = fields.get("count", 1), fields.get("status", 500)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise Invalid("field 'count' must be a non-negative integer")
    if not isinstance(status, int) or not MIN_FAULT_STATUS <= status <= MAX_FAULT_STATUS:
        raise Invalid(f"field 'status' must be an integer {MIN_FAULT_STATUS}-{MAX_FAULT_STATUS}")
    ctx.inventory.fail_adds(count, status)
    return Reply(200, {"op": "add", "count": count, "status": status})


def emulator_state(ctx: Context, _params: Mapping[str, str], _body: bytes) -> Reply:
    knobs = ctx.knobs
    state = {
        "knobs": {
            "host": knobs.host,
            "httpPort": knobs.http_port,
            "rtspPort": ctx.rtsp_port,
            "urlDelayS": knobs.url_delay_s,
        },
        **ctx.inventory.snapshot(),
    }
    return Reply(200, state)


# --- routing ----------------------------------------------------------------------------------

_ID = r"(?P<sensor_id>[^/]+)"
ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = tuple(
    (method, re.compile(pattern + r"\Z"), handler)
    for method, pattern, handler in (
        ("GET", rf"{API_PREFIX}/sensor/version", version),
        ("POST", rf"{API_PREFIX}/sensor/add", add_sensor),
        ("GET", rf"{API_PREFIX}/sensor/list", list_sensors),
        ("GET", rf"{API_PREFIX}/sensor/streams", all_streams),
        ("GET", rf"{API_PREFIX}/sensor/{_ID}/streams", sensor_streams),
        ("DELETE", rf"{API_PREFIX}/sensor/{_ID}", delete_sensor),
        ("POST", rf"{ADMIN_PREFIX}/sensors/{_ID}/drop", drop_sensor),
        ("POST", rf"{ADMIN_PREFIX}/sensors/{_ID}/restore", restore_sensor),
        ("POST", rf"{ADMIN_PREFIX}/faults", set_fault),
        ("GET", rf"{ADMIN_PREFIX}/state", emulator_state),
    )
)


def handle(ctx: Context, method: str, path: str, body: bytes) -> Reply:
    """Route one request; contract errors become replies, anything else propagates (500)."""
    allowed: list[str] = []
    for route_method, pattern, handler in ROUTES:
        found = pattern.match(path)
        if found is None:
            continue
        if route_method != method:
            allowed.append(route_method)
            continue
        try:
            return handler(ctx, found.groupdict(), body)
        except Invalid as exc:
            return error(exc.status, "VMSInvalidParameter", str(exc))
        except UnknownSensor as exc:
            return error(404, "VMSSensorNotFound", f"no sensor with id {exc.args[0]}")
    if allowed:
        return error(405, "VMSMethodNotAllowed", f"{method} not allowed; use {', '.join(allowed)}")
    return error(404, "VMSNotFound", f"no route for {method} {path}")


# --- helpers ----------------------------------------------------------------------------------


def _json_object(body: bytes) -> dict[str, object]:
    try:
        value = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        raise Invalid("body is not valid JSON", 400) from None
    if not isinstance(value, dict):
        raise Invalid("body must be a JSON object", 400)
    return value


def _check_add_fields(fields: Mapping[str, object]) -> None:
    if "url" in fields:
        raise Invalid("field 'url' is not accepted: the camera URL goes in 'sensorUrl'")
    unknown = sorted(set(fields) - set(ADD_REQUIRED) - set(ADD_OPTIONAL))
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}")
    for name in ADD_REQUIRED:
        if not isinstance(fields.get(name), str) or not str(fields[name]).strip():
            raise Invalid(f"field '{name}' is required and must be a non-empty string")
    for name in ("username", "password", "location"):
        if fields.get(name) is not None and not isinstance(fields[name], str):
            raise Invalid(f"field '{name}' must be a string")


def _text(fields: Mapping[str, object], name: str) -> str:
    return str(fields[name]).strip()


def _optional_text(fields: Mapping[str, object], name: str) -> str | None:
    value = fields.get(name)
    return value if isinstance(value, str) and value else None


def _is_tags(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    )


def _sensor_view(sensor: Sensor) -> dict[str, object]:
    view: dict[str, object] = {
        "sensorId": sensor.sensor_id,
        "name": sensor.name,
        "state": STATE_OFFLINE if sensor.dropped else STATE_ONLINE,
        "sensorUrl": sensor.public_url,
    }
    if sensor.location is not None:
        view["location"] = sensor.location
    if sensor.tags is not None:
        view["tags"] = sensor.tags
    return view
