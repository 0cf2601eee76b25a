"""The shared Host view, parsed from list rows (the live counterpart is in test_docker_client)."""

from __future__ import annotations

from controllers.kinds.host.hostview import container_from_row, view_from_rows


def _row(name: str, state: str, status: str, ports: list[dict[str, object]] | None = None
         ) -> dict[str, object]:
    return {"Id": f"id-{name}", "Names": [f"/{name}"], "State": state, "Status": status,
            "Labels": {"k": "v"}, "ImageID": "sha256:abc", "Ports": ports or [],
            "HostConfig": {"NetworkMode": "bridge"}}


def test_health_exit_code_and_pause_are_read_from_the_status_text() -> None:
    assert container_from_row(_row("a", "running", "Up 3 minutes (healthy)")).health == \
        "healthy"
    assert container_from_row(_row("a", "running", "Up 1 second (health: starting)")).health \
        == "starting"
    assert container_from_row(_row("a", "running", "Up 9 minutes (unhealthy)")).health == \
        "unhealthy"
    assert container_from_row(_row("a", "running", "Up 2 hours")).health is None
    exited = container_from_row(_row("a", "exited", "Exited (137) 5 seconds ago"))
    assert exited.exit_code == 137
    assert not exited.running
    paused = container_from_row(_row("a", "paused", "Up 2 minutes (Paused)"))
    assert paused.paused
    assert paused.health is None


def test_ports_count_only_for_containers_that_hold_them_and_images_resolve() -> None:
    port = [{"IP": "127.0.0.1", "PrivatePort": 8000, "PublicPort": 19000, "Type": "tcp"}]
    view = view_from_rows(
        [_row("up", "running", "Up", port), _row("frozen", "paused", "Up (Paused)", port),
         _row("gone", "exited", "Exited (0) 1 hour ago", port),
         _row("udp", "running", "Up", [{"PublicPort": 5000, "Type": "udp"}])],
        [{"Id": "sha256:" + "a" * 64, "RepoTags": ["rtvi:1"], "RepoDigests": []}])
    assert sorted(h.container for h in view.published) == ["frozen", "up"]
    assert view.container("gone") is not None
    assert view.container("nope") is None
    assert view.image("rtvi:1") is not None
    assert view.image("rtvi-emulator@sha256:" + "a" * 64) is not None  # built here: ID digest
    assert view.image("rtvi:2") is None
