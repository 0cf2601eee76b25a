"""Publisher containers on the real engine, checked by really decoding what they serve."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from controllers.clients.docker_client import DockerEngine
from controllers.kinds.streamset.digest import file_sha256
from controllers.kinds.streamset.publisher import image as publisher_image
from controllers.kinds.streamset.publisher.run import (
    MediaMismatch,
    PublishedSource,
    publisher_request,
    start_publisher,
    wait_for_url,
)
from controllers.ownership import LABEL_SOURCE, selector
from state.models import Owner
from tests.controllers.publisher_helpers import (
    RESOURCE,
    SPEC_HASH,
    engine,
    poll,
    probe_until_served,
)

CLIP_SECONDS = 2
WRONG_SHA = "0" * 64


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[DockerEngine]:
    eng = engine()
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def image_id(docker_engine: DockerEngine) -> str:
    return publisher_image.ensure_publisher_image(docker_engine)


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    """A short CYAN H.264 mp4, made on the fly."""
    path = tmp_path / "cyan clip.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    f"color=c=0x00FFFF:s=160x120:r=10:d={CLIP_SECONDS}", "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", str(path)], check=True, timeout=60)
    return path


def test_image_is_built_once_and_reused(docker_engine: DockerEngine, image_id: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    tag, _items = publisher_image.image_tag()
    found = docker_engine.image(tag)
    assert found is not None
    assert found.id == image_id
    capsys.readouterr()
    assert publisher_image.ensure_publisher_image(docker_engine) == image_id
    assert "imported" not in capsys.readouterr().err  # the second call did not rebuild


def test_three_colours_probe_back_as_themselves(docker_engine: DockerEngine, image_id: str,
                                                instance: Owner) -> None:
    sources = [PublishedSource("red", "colour", colour="RED"),
               PublishedSource("green", "colour", colour="#00FF00"),
               PublishedSource("framed", "colour", colour="YELLOW", border="blue")]
    expected = {"red": "solid RED", "green": "solid GREEN", "framed": "YELLOW with a BLUE border"}
    urls = {}
    for source in sources:
        container = start_publisher(docker_engine, instance, RESOURCE, SPEC_HASH, source,
                                    image_id)
        urls[source.name] = wait_for_url(docker_engine, container)
    assert len(set(urls.values())) == 3
    for name, url in urls.items():
        assert probe_until_served(url).description == expected[name]
    owned = docker_engine.list_containers(selector(instance, RESOURCE))
    assert sorted(c.labels[LABEL_SOURCE] for c in owned) == ["framed", "green", "red"]
    assert all(c.name.startswith(f"rtvi-{instance}-pub-cams-") for c in owned)


def test_file_is_served_in_a_loop(docker_engine: DockerEngine, image_id: str, instance: Owner,
                                  clip: Path) -> None:
    source = PublishedSource("clip", "file", file=clip, sha256=file_sha256(clip))
    container = start_publisher(docker_engine, instance, RESOURCE, SPEC_HASH, source, image_id)
    url = wait_for_url(docker_engine, container)
    assert probe_until_served(url).description == "solid CYAN"
    poll("the clip to loop twice",
         lambda: True if "looping (2)" in docker_engine.logs(container) else None,
         timeout_s=CLIP_SECONDS * 2 + 20)
    assert probe_until_served(url).description == "solid CYAN"
    assert docker_engine.container(container).running  # type: ignore[union-attr]


def test_sha256_mismatch_is_refused_before_any_container(docker_engine: DockerEngine,
                                                         image_id: str, instance: Owner,
                                                         clip: Path) -> None:
    source = PublishedSource("clip", "file", file=clip, sha256=WRONG_SHA)
    with pytest.raises(MediaMismatch) as caught:
        start_publisher(docker_engine, instance, RESOURCE, SPEC_HASH, source, image_id)
    assert str(caught.value) == (f"sha256 mismatch for {clip}: expected {WRONG_SHA}, "
                                 f"got {file_sha256(clip)}")
    assert docker_engine.list_containers(selector(instance)) == []


def test_app_refuses_a_wrong_digest_with_exit_3(docker_engine: DockerEngine, image_id: str,
                                               instance: Owner, clip: Path) -> None:
    source = PublishedSource("clip", "file", file=clip, sha256=WRONG_SHA)
    request = publisher_request(instance, RESOURCE, SPEC_HASH, source, image_id)
    container = docker_engine.create(request)  # bypasses the controller-side check on purpose
    docker_engine.start(container)
    info = poll("the publisher to exit",
                lambda: c if (c := docker_engine.container(container)) and not c.running
                else None)
    assert info.exit_code == 3
    assert docker_engine.logs(container).strip() == (
        f"sha256 mismatch for /media/{clip.name}: expected {WRONG_SHA}, got {file_sha256(clip)}")
