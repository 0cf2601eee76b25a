"""A pull in a plan, and a pull's progress as people see it (issue 37): pure, no engine."""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from controllers.errors import PullFailed
from controllers.kinds.deployment.plan import plan
from controllers.kinds.host.archives import MANIFEST, Held, archive_holding, images_in
from controllers.kinds.host.pulls import STALL_S, ImageNeed, PullJob
from reconciler.output import print_plan
from specs.images import parse_image
from specs.models import RegistryLogin
from tests.controllers.test_plan import INSTANCE, _container, _desired

IMAGE = "127.0.0.1:5443/vss/rt-vlm@sha256:" + "cd" * 32
LOGIN = RegistryLogin.model_validate({"server": "127.0.0.1:5443", "username": "$oauthtoken",
                                      "password": {"fromEnv": "NGC_API_KEY"}})


def _need(cause: str = "it is not on Host local") -> ImageNeed:
    return ImageNeed(parse_image(IMAGE), "local", cause, LOGIN)


def test_a_missing_image_is_pulled_before_the_container_is_created() -> None:
    desired = dataclasses.replace(_desired(), image_id="", pull=_need())
    actions = plan(desired, None, None, INSTANCE).actions
    assert [(a.verb, a.target) for a in actions] == [
        ("pull", f"image {IMAGE}"), ("create", "container rtvi-vlm")]
    assert actions[0].cause == ("it is not on Host local; from registry 127.0.0.1:5443 (as "
                                "$oauthtoken)")


def test_a_running_service_is_not_said_to_change_image_while_its_new_one_is_unknown() -> None:
    """A tag that moved: the pull is planned; whether the container changes is known only
    once the image is there (the next pass compares IDs)."""
    desired = _desired()
    moved = dataclasses.replace(desired, image_id="", pull=_need("tag moved"))
    actions = plan(moved, _container(desired), None, INSTANCE).actions
    assert [a.verb for a in actions] == ["pull"]


def test_the_plan_counts_images_to_pull() -> None:
    from controllers.contract import ResourcePlan

    desired = dataclasses.replace(_desired(), image_id="", pull=_need())
    rp = ResourcePlan(desired.resource, "vlm", desired, plan(desired, None, None, INSTANCE))
    console = Console(record=True, width=200)
    print_plan(console, [rp])
    text = console.export_text()
    assert f"v Deployment/vlm: pull image {IMAGE}" in text
    assert "Plan: 1 image(s) to pull, 1 to create, 0 to recreate, 0 in sync." in text


def test_a_pulls_progress_reads_like_docker_pull() -> None:
    job = PullJob(_need())
    assert job.summary().endswith("checking size")
    job.size_bytes = 30_000_000
    job.note({"status": "Pulling from vss/rt-vlm", "id": "sha256"})
    job.note({"status": "Already exists", "id": "a1"})
    job.note({"status": "Pulling fs layer", "id": "b2"})
    assert "0.0 of 30.0 MB" in job.summary()  # the manifest's size, until layers say theirs
    job.note({"status": "Downloading", "id": "b2",
              "progressDetail": {"current": 5_000_000, "total": 20_000_000}})
    said = job.summary()  # what it downloads: a layer the Host has is not counted
    assert "from registry 127.0.0.1:5443 (as $oauthtoken): 5.0 of 20.0 MB, 1 of 2 layers" in said
    job.note({"status": "Download complete", "id": "b2"})
    assert "20.0 of 20.0 MB, 2 of 2 layers" in job.summary()


def test_a_pull_the_registry_stopped_answering_is_given_up_with_what_the_engine_said() -> None:
    job = PullJob(_need())
    job.note({"status": "Downloading", "id": "b2",
              "progressDetail": {"current": 1, "total": 10}})
    job.note({"status": "Retrying in 5 seconds", "id": "b2"})
    assert "(layer b2: Retrying in 5 seconds)" in job.summary()  # still waiting: no error
    job._moved -= STALL_S  # as if no byte came for that long
    with pytest.raises(PullFailed, match=r"stopped answering mid-pull .*Retrying in 4 seconds"):
        job.note({"status": "Retrying in 4 seconds", "id": "b2"})


def _archive(path: Path, manifest: object) -> None:
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_an_archive_is_found_by_the_image_id_a_pin_names_or_by_its_tag(tmp_path: Path) -> None:
    image_id = "ab" * 32
    good = tmp_path / "good.tar"
    _archive(good, [{"Config": f"{image_id}.json", "RepoTags": ["rtvi:1"], "Layers": []}])
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar")
    odd = tmp_path / "odd.tar"
    _archive(odd, {"Config": "x"})
    assert images_in(str(good)) == [Held(f"sha256:{image_id}", ("rtvi:1",))]
    assert images_in(str(junk)) == images_in(str(odd)) == []
    paths = [str(junk), str(odd), str(good)]
    assert archive_holding(paths, parse_image(f"rtvi@sha256:{image_id}")) == str(good)
    assert archive_holding(paths, parse_image("rtvi:1")) == str(good)
    assert archive_holding(paths, parse_image("rtvi:2")) is None
    assert archive_holding(paths, parse_image("rtvi@sha256:" + "cd" * 32)) is None
