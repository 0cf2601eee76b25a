"""The emulator's route table, in-process: templates, aliases, 404 versus 405.

Why test it apart from the server: later endpoint groups (streams, captions, files) depend on
path parameters and method handling that the first endpoints do not exercise yet.
"""

from __future__ import annotations

import pytest

from emulators.rtvi.config import load_settings
from emulators.rtvi.routing import Match, MethodNotAllowed, Request, Response, Router
from emulators.rtvi.server import build_router
from emulators.rtvi.state import ServiceState


def _echo(_state: ServiceState, request: Request) -> Response:
    return Response.json(200, dict(request.params))


def test_templates_bind_path_parameters() -> None:
    router = Router()
    router.add("DELETE", "/v1/streams/delete/{stream_id}", _echo)
    router.add("DELETE", "/v1/streams/delete-batch", _echo)
    found = router.resolve("DELETE", "/v1/streams/delete/5b1c")
    assert isinstance(found, Match)
    assert found.params == {"stream_id": "5b1c"}
    batch = router.resolve("DELETE", "/v1/streams/delete-batch")
    assert isinstance(batch, Match)
    assert batch.route.template == "/v1/streams/delete-batch"
    assert router.resolve("DELETE", "/v1/streams/delete/a/b") is None
    assert router.resolve("DELETE", "/v1/streams/delete/") is None


def test_wrong_method_is_405_with_allowed_methods() -> None:
    router = Router()
    router.add("GET", "/v1/files", _echo)
    router.add("POST", "/v1/files", _echo)
    refused = router.resolve("PUT", "/v1/files")
    assert refused == MethodNotAllowed("/v1/files", ("GET", "POST"))
    assert router.resolve("GET", "/v1/nothing") is None


def test_duplicate_routes_are_refused() -> None:
    router = Router()
    router.add("GET", "/v1/models", _echo)
    with pytest.raises(ValueError, match="duplicate"):
        router.add("get", "/v1/models", _echo)


def test_service_routes_include_aliases() -> None:
    templates = set(build_router().templates())
    for path in (
        "/v1/health/ready",
        "/v1/ready",
        "/v1/health/live",
        "/v1/live",
        "/v1/startup",
        "/v1/models",
        "/v1/metrics",
        "/v1/metadata",
        "/v1/assets/stats",
    ):
        assert ("GET", path) in templates


def test_ready_handler_follows_the_phase() -> None:
    state = ServiceState(load_settings({}))
    router = build_router()
    found = router.resolve("GET", "/v1/health/ready")
    assert isinstance(found, Match)
    request = Request("GET", "/v1/health/ready", {}, {}, b"")
    assert found.route.handler(state, request).status == 503
    state.mark_ready()
    assert found.route.handler(state, request).status == 200
    state.mark_failed()
    assert found.route.handler(state, request).status == 503
