"""A pull in a plan, and a pull's progress as people see it (issue 37): pure, no engine."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from controllers.deployment.plan import plan
from controllers.host.pulls import ImageNeed, PullJob
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
    job.note({"status": "Downloading", "id": "b2",
              "progressDetail": {"current": 5_000_000, "total": 20_000_000}})
    said = job.summary()
    assert "from registry 127.0.0.1:5443 (as $oauthtoken): 5.0 of 30.0 MB, 1 of 2 layers" in said
    job.note({"status": "Download complete", "id": "b2"})
    assert "20.0 of 30.0 MB, 2 of 2 layers" in job.summary()
